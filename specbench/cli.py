"""Typer front end. Each command calls one function of :mod:`specbench.api`.

Exit codes: 0 ok, 1 regression (gate), 2 bad input or configuration,
3 nothing measured / run errors (gate).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from specbench import api
from specbench.api import shown
from specbench.errors import SpecbenchError, SpecbenchWarning


class _Commands(TyperGroup):
    """Every command: a :class:`~specbench.errors.SpecbenchError` (bad input or configuration) is
    printed, one line per problem, and exits 2 (the one place that maps it)."""

    def invoke(self, ctx: Any) -> Any:  # typer's own click Context
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            try:
                return super().invoke(ctx)
            except SpecbenchError as exc:
                _bad_input(exc.messages)


_python_showwarning = warnings.showwarning


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """specbench's own warnings as 'warning <text>' (the text as typed: a file:line stays intact, control
    characters escaped); any other warning in Python's format."""
    if issubclass(category, SpecbenchWarning):
        err.print(styled("warning", "yellow", str(message)), soft_wrap=True)
    else:
        _python_showwarning(message, category, *args, **kwargs)


app = typer.Typer(
    cls=_Commands,
    help="specbench: benchmark speculative decoding on vLLM.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


class PlainConsole(Console):
    """A console that shows what it is given as it is (issue 35): no markup, no ``:emoji:`` codes, no
    highlighting, and every string it renders -- lines, table cells, titles, rules -- passed through
    :func:`~specbench.api.shown` (control characters and undecodable bytes escaped). Only a
    :class:`~rich.text.Text` that specbench builds (:func:`styled`) carries style."""

    def __init__(self, **kwargs) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **kwargs)

    def render_str(self, text: str, **kwargs) -> Text:
        return super().render_str(shown(text), **kwargs)


def styled(label: str, style: str, rest: str) -> Text:
    """'error <rest>' with only specbench's own label styled; ``rest`` (user text) shown as it is."""
    return Text.assemble((label, style), " " + shown(rest))


console = PlainConsole()
err = PlainConsole(stderr=True)

EXIT_BAD_INPUT = SpecbenchError.exit_code


def _bad_input(lines: list[str]) -> NoReturn:
    for line in lines:
        err.print(styled("error", "red", line), soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


@app.command("validate")
def validate_command(suites: Annotated[list[Path], typer.Argument(help="suite YAML files")]) -> None:
    """Validate suite files (exit 2 with file:line messages when one is bad)."""
    errors, read = api.validate(suites)
    if errors:
        _bad_input(errors)
    for s in suites:
        console.print(styled("ok", "green", str(s)), soft_wrap=True)
        for line in read.get(str(s), []):
            console.print("  dataset " + line, soft_wrap=True)


def methods_table() -> Table:
    """The registered methods, two columns so the description keeps its width at 80 columns:
    the name, then the description over its facts (vLLM method, speculator, max K, platforms)."""
    t = Table("method", "description · vLLM method, speculator, max K, platforms", box=box.SIMPLE_HEAD,
              pad_edge=False, padding=(0, 1))
    t.columns[0].no_wrap = True
    for m in api.methods():
        facts = (f"vLLM {m.vllm_method or '–'} · {'needs a speculator' if m.needs_speculator else 'no speculator'}"
                 f" · max K {m.max_k or '–'} · {', '.join(m.platforms) or 'all platforms'}")
        t.add_row(m.name, Text.assemble(m.description + "\n", (facts, "dim")))
    return t


def datasets_table() -> Table:
    """The dataset kinds and what each reads."""
    t = Table("kind", "description", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    t.columns[0].no_wrap = True
    for k, v in api.dataset_kinds().items():
        t.add_row(k, v)
    return t


@app.command("list")
def list_command(what: Annotated[str, typer.Argument(help="methods | datasets")]) -> None:
    """List the registered methods or dataset kinds."""
    if what == "methods":
        console.print(methods_table())
    elif what == "datasets":
        console.print(datasets_table())
    else:
        _bad_input([f"unknown list {what!r}: use 'methods' or 'datasets'"])


def _headline(reason: str) -> str:
    """The informative line of an engine error (pydantic puts vLLM's message on line 2)."""
    lines = [ln.strip() for ln in reason.strip().splitlines() if ln.strip()]
    for ln in lines:
        if "Value error, " in ln:
            return ln.split("Value error, ", 1)[1].split(" [type=")[0][:200]
    return lines[0][:200] if lines else ""


class _RichProgress:
    """Adapts runner progress events to a rich progress bar."""

    def __init__(self, progress: Progress, total: int | None):
        self.p = progress
        self.task = progress.add_task("cells", total=total)

    def __call__(self, ev: api.RunProgress) -> None:
        event, cell, msg = ev.kind, ev.cell, ev.message
        if event == "engine_start":
            self.p.update(self.task, description=shown(f"starting {msg}"))
        elif event == "cell_start":
            self.p.update(self.task, description=shown(cell.cell_id) if cell is not None else "")
        elif event in ("cell_ok", "cell_failed", "cell_skipped"):
            self.p.advance(self.task)
            if event != "cell_ok":
                label = "failed" if event == "cell_failed" else "skipped"
                first = _headline(msg)
                where = cell.cell_id if cell is not None else "?"
                self.p.console.print(styled(label, "yellow", f"{where}: {first}"), soft_wrap=True)


@app.command("run")
def run_command(
    suite: Annotated[Path, typer.Argument(help="suite YAML")],
    limit: Annotated[int | None, typer.Option(help="at most N prompts per dataset")] = None,
    out: Annotated[Path | None, typer.Option(help="results root (default ./results)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print each engine's exact configuration")] = False,
    resume: Annotated[Path | None, typer.Option(help="continue an interrupted run directory")] = None,
    report: Annotated[bool, typer.Option(help="write the reports at the end")] = True,
    platform: Annotated[
        str | None, typer.Option(help="cpu | cuda (default: detected); e.g. dry-run a GPU suite on a laptop")
    ] = None,
    allow_code_exec: Annotated[
        bool, typer.Option("--allow-code-exec", help="score HumanEval by running generated code in the sandbox")
    ] = False,
    num_speculative_tokens: Annotated[
        str | None,
        typer.Option(help="a quick K sweep: run every speculating method at these K values, e.g. 1,3,5"),
    ] = None,
    executor: Annotated[
        str | None, typer.Option(help="local (one engine at a time) | ray (spread engines over a Ray cluster)")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster: auto | HOST:PORT (default: RAY_ADDRESS, else a local Ray)")
    ] = None,
    max_parallel_engines: Annotated[
        int | None, typer.Option(min=1, help="at most N engines at once (ray executor)")
    ] = None,
    noise: Annotated[Path | None, typer.Option(
        help="an A/A calibration (specbench calibrate) whose between-run noise the speed intervals include "
             "(default: results/<suite>/noise.json when it is of this hardware class)")] = None,
    budget: Annotated[float | None, typer.Option(
        min=1, help="seconds the headline's speed rounds may take after the single pass (the suite's "
                    "headline.budget_s); what is undecided then stays so")] = None,
) -> None:
    """Run a suite on real engines; write records, summary and reports."""
    ks: list[int] | None = None
    if num_speculative_tokens is not None:
        try:
            ks = [int(v) for v in num_speculative_tokens.split(",") if v.strip()]
        except ValueError:
            _bad_input([f"--num-speculative-tokens: expected integers separated by commas, got {num_speculative_tokens!r}"])
        if not ks:
            _bad_input(["--num-speculative-tokens: give at least one K"])
    # The suite is read and expanded once, here (a resumed run: its stored suite and plan, not the YAML).
    planned = api.resume_plan(resume) if resume is not None else api.plan(suite, ks, platform)
    if budget is not None:
        try:
            planned = api.with_headline_budget(planned, budget)
        except ValueError as exc:
            _bad_input([f"--budget: {exc}"])
    if dry_run:
        for line in api.dataset_plan(planned.suite):  # a SuiteError (bad rows, file:line) exits 2
            console.print("dataset " + line, highlight=False, soft_wrap=True)
        for line in api.equivalence_plan(planned.suite):
            console.print("equivalence " + line, highlight=False, soft_wrap=True)
        for line in api.headline_plan(planned, platform):
            console.print("headline " + line, highlight=False, soft_wrap=True)
        _print_engine_configs(planned, platform)
        return
    timeline = api.Timeline()  # where the time goes (issue 16): the manifest's time_breakdown, the closing line
    try:
        with Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as p:
            run_dir = api.run(
                planned, out=out, limit=limit, progress=_RichProgress(p, planned.n_cells), platform=platform,
                allow_code_exec=allow_code_exec or None, executor=executor, ray_address=ray_address,
                max_parallel_engines=max_parallel_engines, timeline=timeline, noise=noise,
            )
    except api.StopRequested as stop:  # the progress display has stopped: this is the last line
        _interrupted(stop, suite)
    console.print(f"results: {run_dir}", soft_wrap=True)
    summary = api.load_summary(run_dir)  # read once: the closing tables and the reports
    _print_summary(run_dir, summary)
    if report:
        for kind, path in api.report(run_dir, timeline=timeline, summary=summary).items():
            console.print(f"{kind} report: {path}", soft_wrap=True)
    _print_time(run_dir)


def _print_engine_configs(planned: api.RunPlan, platform: str | None) -> None:
    """``--dry-run``: each engine's cells, references, speculative_config, vLLM arguments and server command."""
    for e in api.dry_run(planned, platform=platform):
        console.rule(f"engine {e['engine']} ({e['kind']}, {e['cells']} cells)")
        for line in e["cell_lines"]:
            console.print("cells " + line, highlight=False, soft_wrap=True)
        for r in e["references"]:
            t = f", T={r['temperature']:g}" if r.get("temperature") is not None else ""
            console.print(f"reference {r['metric']} {r['value']:g} on {r.get('dataset') or 'any dataset'}{t}: "
                          f"{r['source']}", highlight=False, soft_wrap=True)
        console.print("speculative_config:", highlight=False)
        console.print(json.dumps(e["speculative_config"], indent=2, sort_keys=True), highlight=False)
        console.print(f"LLM(**{json.dumps(e['llm_kwargs'], sort_keys=True)})", highlight=False, soft_wrap=True)
        if e["env"]:
            console.print("env: " + " ".join(f"{k}={v}" for k, v in e["env"].items()), highlight=False)
        console.print(e["server_command"], highlight=False, soft_wrap=True)


def _print_time(run_dir: Path) -> None:
    """One line: where the run's wall went (the manifest's ``time_breakdown``)."""
    line = api.run_time_line(run_dir)
    if line:
        console.print(f"time: {line}", highlight=False, soft_wrap=True)


def _interrupted(stop: api.StopRequested, suite: Path) -> None:
    """The run was stopped by a signal: say how to resume, last, and exit 128 + the signal's number."""
    for sig in api.STOP_SIGNALS:  # the run is over; another signal now would only cut the message short
        signal.signal(sig, signal.SIG_IGN)
    if stop.run_dir is None:
        line = f"interrupted by {stop.signame} before the run started"
    else:
        n = stop.requests if stop.requests is not None else 0
        resume = shlex.join(["specbench", "run", str(suite), "--resume", str(stop.run_dir)])
        line = f"interrupted by {stop.signame} after {n} request{'s' if n != 1 else ''}; resume with: {resume}"
    err.print(line, soft_wrap=True)
    raise typer.Exit(stop.exit_code)


def closing_tables(summary: api.RunSummary) -> list[Table]:
    """The answer first (each method against the reference, per target), then one compact table of every
    group per target (:func:`specbench.api.terminal_tables`), as rich tables that never wrap a cell."""
    tables = []
    for spec in api.terminal_tables(summary):
        t = Table(*spec.header, title=spec.title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1), caption=spec.caption, caption_justify="left")
        for col in t.columns:
            col.no_wrap = True
        for row, end in zip(spec.rows, spec.section_ends, strict=True):
            t.add_row(*row, end_section=end)
        tables.append(t)
    return tables


def _print_summary(run_dir: Path, summary: api.RunSummary | None = None) -> None:
    """The closing tables: the headline, then every group (≤ 100 columns, never wrapped; piped output is 100 wide)."""
    s = summary if summary is not None else api.load_summary(run_dir)
    out = console if console.is_terminal else PlainConsole(width=100)
    for t in closing_tables(s):
        out.print(t, highlight=False)
    bad = [c for c in s.checks if not c.ok]
    if bad:
        for c in bad:
            err.print(styled("check failed", "red", f"{c.group_id}: {c.check}"), soft_wrap=True)


@app.command("analyze")
def analyze_command(
    run_dir: Annotated[Path, typer.Argument(help="a results/<suite>/<run-id> directory")],
    allow_code_exec: Annotated[
        bool, typer.Option("--allow-code-exec", help="score HumanEval by running generated code in the sandbox")
    ] = False,
    noise: Annotated[Path | None, typer.Option(
        help="an A/A calibration (specbench calibrate) whose between-run noise the speed intervals include "
             "(default: results/<suite>/noise.json when it is of this hardware class)")] = None,
) -> None:
    """Rebuild summary.json from the raw records (no engine needed)."""
    summary = api.analyze(run_dir, allow_code_exec=allow_code_exec or None, noise=noise)
    _print_summary(run_dir, summary)
    torn = summary.extra.torn_lines
    if torn:
        err.print(styled("note", "yellow", f"{run_dir}: {api.torn_lines_note(torn)}"), soft_wrap=True)


@app.command("calibrate")
def calibrate_command(
    runs: Annotated[list[Path], typer.Argument(help="≥ 2 finished runs of one suite, identical code, this machine")],
    out: Annotated[Path | None, typer.Option(help="where to write it (default: noise.json beside the runs)")] = None,
) -> None:
    """A/A noise calibration: how far identical code moves between runs, per speed metric.

    Later runs of the suite on this hardware class (and `specbench analyze`) add it to their speed
    intervals when it is kept beside them, and `gate` tests speed against a single run with it: a
    trend, not a speed gate (for that, `specbench ab`: both sides in one job)."""
    cal, path = api.calibrate(runs, out)
    console.print(f"{cal.describe()}\nwritten: {path}", highlight=False, soft_wrap=True)


@app.command("report")
def report_command(
    run_dir: Annotated[Path, typer.Argument(help="a results/<suite>/<run-id> directory")],
    out: Annotated[Path | None, typer.Option(help="reports directory")] = None,
) -> None:
    """Write the markdown and HTML reports of a run."""
    paths = api.report(run_dir, out)
    for kind, path in paths.items():
        console.print(f"{kind} report: {path}", soft_wrap=True)


def _step_summary(markdown: str, enabled: bool) -> None:
    """Append to ``$GITHUB_STEP_SUMMARY`` (the job summary of a GitHub Actions step) when it is set."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if enabled and path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")


StepSummary = Annotated[
    bool, typer.Option("--step-summary/--no-step-summary",
                       help="also append the Markdown to $GITHUB_STEP_SUMMARY when that is set")]
DbOption = Annotated[
    str | None, typer.Option("--db", help="history database: an SQLAlchemy URL or an SQLite file "
                                          "(default results/history.sqlite)")]


@app.command("compare")
def compare_command(
    runs: Annotated[list[Path], typer.Argument(
        help="the new run directory (with --baseline); the old form BASE NEW still works, deprecated",
        show_default=False)],
    baseline: Annotated[Path | None, typer.Option(help="the baseline run directory (as in gate)")] = None,
    speed_noise_floor_pct: Annotated[
        float | None,
        typer.Option(help="test speed changes with each run's interval widened to at least ±this % "
                     "(default: speed is shown, not tested: within-run intervals miss machine drift)"),
    ] = None,
    step_summary: StepSummary = True,
) -> None:
    """Match a run's cells with the baseline's and show each metric's change, with intervals:
    ``compare NEW --baseline BASE``."""
    if baseline is not None and len(runs) == 1:
        base_run, new_run = baseline, runs[0]
    elif baseline is None and len(runs) == 2:
        base_run, new_run = runs
        err.print(f"note: `compare BASE NEW` is deprecated; use `specbench compare {new_run} --baseline {base_run}`",
                  soft_wrap=True)
    else:
        _bad_input([f"compare: give the new run and --baseline BASE (got {len(runs)} run(s)"
                    f"{' and --baseline' if baseline is not None else ''})"])
    text = api.compare(base_run, new_run, speed_noise_floor_pct=speed_noise_floor_pct)
    typer.echo(shown(text))  # raw Markdown: no wrapping
    _step_summary(text, step_summary)


@app.command("schedule")
def schedule_command(
    run_dir: Annotated[Path, typer.Argument(help="a run directory")],
    out: Annotated[Path | None, typer.Option(help="where to write the schedule (JSON; default RUN_DIR/schedule.json)")]
    = None,
) -> None:
    """K per batch size for vLLM's dynamic speculative decoding (num_speculative_tokens_per_batch_size),
    predicted from the run: writes the schedule file and prints its tables."""
    made, path = api.schedule(run_dir, out)
    typer.echo(shown(api.schedule_markdown(made)))  # raw Markdown: no wrapping
    console.print(f"schedule: {path}", soft_wrap=True)


@app.command("gate")
def gate_command(
    new_run: Annotated[Path, typer.Argument(help="the run to judge")],
    baseline: Annotated[str, typer.Option(
        help="a stored run directory, a JSON of expected values, or history[:N] (the median of the last N "
             "runs of the suite on this hardware class in --db; N=5 by default)")],
    rules: Annotated[Path | None, typer.Option(help="gate rules YAML (default rules otherwise)")] = None,
    db: DbOption = None,
    noise: Annotated[Path | None, typer.Option(
        help="speed noise calibrated on identical-code runs of this hardware class (specbench calibrate); "
             "default: the calibration the new run was analysed with; without one speed against a single run "
             "is not gated")] = None,
    step_summary: StepSummary = True,
) -> None:
    """CI regression gate. Exit 0 pass, 1 regression, 2 bad input/config, 3 nothing measured / run errors."""
    result = api.gate(new_run, baseline, rules=rules, db=db, noise=noise)
    typer.echo(shown(result.markdown))  # raw Markdown: no wrapping
    _step_summary(result.markdown, step_summary)
    raise typer.Exit(result.exit_code)


@app.command("ab")
def ab_command(
    suite: Annotated[Path, typer.Argument(help="suite YAML (its rounds: N is the cap on rounds per group)")],
    a: Annotated[str | None, typer.Option("--a", help="arm A: an arm file (.yaml), a Python interpreter with its "
                                          "own vLLM, or nothing for this environment")] = None,
    b: Annotated[str | None, typer.Option("--b", help="arm B (as --a)")] = None,
    budget: Annotated[float | None, typer.Option(help="seconds from now after which undecided groups get no more "
                                                 "rounds")] = None,
    rules: Annotated[Path | None, typer.Option(help="rules YAML whose ab: section sets metrics and margin "
                                               "(gates.example.yaml)")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="fail when a verdict is still undecided at the end")] = False,
    out: Annotated[Path | None, typer.Option(help="results root (default ./results)")] = None,
    step_summary: StepSummary = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print how the pairs share the machine and each "
                                          "engine's exact configuration, start nothing")] = False,
    platform: Annotated[str | None, typer.Option(help="cpu | cuda (default: detected)")] = None,
) -> None:
    """A/B in one job: both arms' engines, interleaved rounds, sequential verdicts. Exit 0 no regression,
    1 regression, 2 bad input, 3 nothing measured."""
    if dry_run:
        planned = api.ab_plan(suite, a, b, platform)
        for arm, name in zip(planned.arms, "AB", strict=True):
            console.print(f"arm {name}: {arm.describe()}", highlight=False, soft_wrap=True)
        console.print(f"residency: {planned.residency}", highlight=False, soft_wrap=True)
        _print_engine_configs(planned.plan, platform)
        return
    timeline = api.Timeline()
    try:
        with Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as p:
            report = api.ab(suite, a, b, out=out, budget_s=budget, rules=rules, strict=strict,
                            progress=_RichProgress(p, None), platform=platform, timeline=timeline)
    except api.StopRequested as stop:
        for sig in api.STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        err.print(f"interrupted by {stop.signame}: an A/B run is not resumed; run it again", soft_wrap=True)
        raise typer.Exit(stop.exit_code) from None
    console.print(f"results: {report.run_dir}", soft_wrap=True)
    typer.echo(shown(report.markdown))
    _step_summary(report.markdown, step_summary)
    raise typer.Exit(report.exit_code)


history_app = typer.Typer(help="The history database of runs (SQLite by default; any SQLAlchemy URL).",
                          no_args_is_help=True)
app.add_typer(history_app, name="history")


@history_app.command("add")
def history_add_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="results/<suite>/<run-id> directories")],
    db: DbOption = None,
) -> None:
    """Store runs' metrics and context (analyzing a run without summary.json); a stored run is left unchanged."""
    for r in api.history_add(run_dirs, db):
        console.print(f"{'added' if r.added else 'already stored'} {r.run_id}"
                      + (f" ({r.n_groups} groups, {r.n_metrics} metrics)" if r.added else ""),
                      soft_wrap=True)


@history_app.command("list")
def history_list_command(suite: Annotated[str | None, typer.Option(help="only this suite")] = None,
                 db: DbOption = None) -> None:
    """The stored runs, oldest first."""
    runs = api.history_runs(suite, db)
    t = Table("run", "suite", "date", "commit", "hardware class")
    for col in t.columns:  # a long run id or suite name folds onto more lines, never cut with an ellipsis
        col.overflow = "fold"
    for r in runs:
        t.add_row(r.run_id, r.suite, r.created_at, r.git_commit or "–", r.hardware_class)
    console.print(t)


@app.command("trend")
def trend_command(
    out: Annotated[Path, typer.Option(help="directory for trend-<suite>.md/.html")],
    suite: Annotated[str | None, typer.Option(help="only this suite")] = None,
    db: DbOption = None,
) -> None:
    """Every metric of every group over the stored runs: Markdown and HTML with figures, per suite."""
    pages = api.trend(out, suite, db)
    for name, paths in pages.items():
        console.print(f"{name}: {paths['html']} {paths['markdown']}", soft_wrap=True)


@app.command("assets")
def assets_command(
    train: Annotated[bool, typer.Option(help="train the zoo (target + drafters)")] = False,
    quick: Annotated[bool, typer.Option(help="train for seconds only (tests)")] = False,
    cache_dir: Annotated[Path | None, typer.Option(help="cache directory")] = None,
) -> None:
    """Build (or find in the cache) the tiny local target and speculators."""
    a = api.assets(cache_dir, train=train, quick=quick)
    console.print(f"target: {a.target}", soft_wrap=True)
    for k, v in a.speculators.items():
        console.print(f"{k}: {v}", soft_wrap=True)


def main() -> None:  # pragma: no cover
    sys.exit(app())
if __name__ == "__main__":  # python -m specbench.cli
    main()
