"""The Python API: validate / plan / run / analyze / report, and compare / gate / history across runs.

Each CLI command calls one function here; these functions only orchestrate the stages (the plan
from config and execution.run_plan, the runner, scoring, analysis, results, report). A run's
suite is read and expanded once, into a :class:`RunPlan`: ``run(plan(path))``, or
``run(resume_plan(run_dir))`` for a stopped run (its stored suite, never the YAML again).
``analyze`` rebuilds ``summary.json`` from the raw records alone, so every number in a report can
be recomputed without an engine. Every error a user can fix is a :class:`SpecbenchError`.
``__all__`` is the API.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from specbench import datasets
from specbench.analysis.ab_rounds import ABResult
from specbench.analysis.timing_estimate import recorded_engine_spans
from specbench.config.arms import Arm
from specbench.config.plan import Plan, with_ks
from specbench.config.suite import Suite, SuiteError, load_suite
from specbench.datasets import DatasetError as DatasetError  # a dataset that cannot be read: bad input
from specbench.engines.kept import KeptEngines as KeptEngines  # api.run(keep=KeptEngines())
from specbench.errors import SpecbenchError
from specbench.execution.driver import Progress, Runner, RunProgress, detect_platform
from specbench.execution.driver import RunRefused as RunRefused  # the CLI reports it as bad input
from specbench.execution.executors import make_executor
from specbench.execution.interrupt import SIGNALS as STOP_SIGNALS  # the signals that stop a run
from specbench.execution.interrupt import StopRequested, stop_on_signals
from specbench.execution.run_manifest import finish_manifest, new_run_manifest, resume_manifest
from specbench.execution.run_manifest import record_time_breakdown as record_time_breakdown
from specbench.execution.run_plan import DataChanged as DataChanged  # a resumed run's data changed: bad input
from specbench.execution.run_plan import RunPlan, engine_configs, plan_resume, plan_run
from specbench.execution.run_plan import headline_plan as headline_plan  # --dry-run
from specbench.execution.run_plan import with_headline_budget as with_headline_budget  # --budget
from specbench.execution.timeline import Timeline
from specbench.report.build import torn_lines_note as torn_lines_note  # what a front end shows of a run
from specbench.report.terminal import TerminalTable, shown, terminal_tables
from specbench.results import run_noise, rundir
from specbench.results.manifest import RunManifest
from specbench.results.noise_calibration import NoiseCalibration
from specbench.results.noise_calibration import NoiseError as NoiseError  # the CLI reports it as bad input
from specbench.results.summary import RunSummary

if TYPE_CHECKING:
    from specbench.config.methods import MethodInfo
    from specbench.regression.history import AddResult, RunInfo
    from specbench.results.schedule_file import ScheduleFile
    from specbench.zoo.assets import TinyAssets

__all__ = [
    # a run: plan it once (or take a stopped run's stored plan), run it, rebuild and render its summary
    "validate", "load_suite", "with_ks", "plan", "resume_plan", "dry_run", "dataset_plan", "equivalence_plan",
    "headline_plan", "with_headline_budget",
    "run", "analyze", "load_summary", "report", "record_time_breakdown", "results_root",
    # K per batch size for vLLM's dynamic speculative decoding, predicted from a run
    "schedule",
    # across runs
    "compare", "gate", "ab_plan", "ab", "calibrate", "history_add", "history_runs", "trend",
    # the tiny zoo; what a suite can name
    "assets", "methods", "dataset_kinds",
    # what a front end shows of a run: text as a terminal shows it, the closing tables, notes
    "shown", "terminal_tables", "TerminalTable", "torn_lines_note", "run_time_line", "schedule_markdown",
    # types
    "RunPlan", "Suite", "RunSummary", "Validation", "GateReport", "ABPlan", "ABReport", "KeptEngines", "Timeline", "NoiseCalibration", "RunProgress",
    "StopRequested", "STOP_SIGNALS",
    # errors: every one a SpecbenchError (bad input, exit 2 in the CLI)
    "SpecbenchError", "SuiteError", "InputError", "RunRefused", "NoiseError", "DataChanged", "DatasetError",
]


def methods() -> list[MethodInfo]:
    """The registered speculative decoding methods (``method:`` in a suite)."""
    from specbench.config.methods import METHODS

    return list(METHODS.values())


def dataset_kinds() -> dict[str, str]:
    """The dataset kinds (``kind:`` in a suite) and what each reads."""
    return dict(datasets.DESCRIPTIONS)


class Validation(NamedTuple):
    errors: list[str]  # every error line of every suite and its data (empty: all valid)
    read: dict[str, list[str]]  # suite path → what was read of each dataset ('name: …'; a hub source: its form only)


def validate(paths: list[Path]) -> Validation:
    """Check every suite and read every local dataset file it names, as a run reads it, without
    engines or a tokenizer (:func:`specbench.datasets.check`): bad lines are ``file:line`` errors."""
    errors: list[str] = []
    read: dict[str, list[str]] = {}
    for p in paths:
        try:
            suite = load_suite(p)
        except SuiteError as exc:
            errors.extend(exc.messages)
            continue
        checks = _check_data(suite)
        errors += [line for c in checks for line in c.shown()]
        read[str(p)] = [f"{c.dataset}: {c.read}" for c in checks if c.read]
    return Validation(errors, read)


def _check_data(suite: Suite) -> list[datasets.DataCheck]:
    base = Path(suite.source_path).parent if suite.source_path else Path.cwd()
    return [datasets.check(d, base) for d in suite.datasets]


def plan(suite: Suite | Path | str, ks: list[int] | None = None, platform: str | None = None) -> RunPlan:
    """A new run's plan: the suite (loaded when a path; raises :class:`SuiteError`) with every
    speculating method at the K values ``ks`` (``--num-speculative-tokens 1,3,5``), expanded once for
    ``platform`` (default: detected). Hand it to :func:`run` (and to :func:`dry_run`)."""
    return plan_run(with_ks(suite if isinstance(suite, Suite) else load_suite(suite), ks), platform)


def resume_plan(run_dir: Path) -> RunPlan:
    """The stored suite and plan of an interrupted run (``--resume``), never its YAML again; refused
    (:class:`DataChanged`) when a dataset's file differs from the sha256 its manifest recorded."""
    return plan_resume(Path(run_dir))


def dry_run(suite: Suite | RunPlan, platform: str | None = None, assets_factory: Any = None) -> list[dict[str, Any]]:
    """Every engine's exact configuration, without starting anything (``assets_factory``:
    the tiny zoo to resolve ``model: tiny`` with, as in :func:`~specbench.engines.factory.resolve_engine`)."""
    return engine_configs(suite if isinstance(suite, RunPlan) else plan_run(suite, platform), platform or detect_platform(),
                          assets_factory)


def dataset_plan(suite: Suite) -> list[str]:
    """What is sent for datasets whose prompts are built or cut (input lengths, SPEED-Bench), and what
    was read of each dataset, in words (for --dry-run); bad data raises :class:`SuiteError` (``file:line``)."""
    checks = _check_data(suite)
    errors = [line for c in checks for line in c.shown()]
    if errors:
        raise SuiteError(errors)
    built = [line for d in suite.datasets if (line := datasets.plan_line(d)) is not None]
    return built + [f"{c.dataset}: {c.read}" for c in checks if c.read]


def equivalence_plan(suite: Suite) -> list[str]:
    """What the suite's lossless checks will do, in words (for --dry-run)."""
    from specbench.analysis.equivalence import plan_lines

    return plan_lines(suite.equivalence)


def results_root(out: Path | None) -> Path:
    return Path(out) if out is not None else Path.cwd() / "results"


def run(
    suite: RunPlan | Suite | Path | str,
    *,
    out: Path | None = None,
    limit: int | None = None,
    resume: Path | None = None,
    progress: Progress | None = None,
    platform: str | None = None,
    allow_code_exec: bool | None = None,
    num_speculative_tokens: list[int] | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    max_parallel_engines: int | None = None,
    timeline: Timeline | None = None,
    keep: KeptEngines | None = None,
    noise: Path | None = None,
) -> Path:
    """Run a suite (or resume a run) and write records, summary and reports.

    ``suite``: the run's plan (:func:`plan`, :func:`resume_plan`), else a suite or its path, planned
    here (``num_speculative_tokens`` applied); with ``resume`` (a run directory) and no plan, the
    run's stored plan (:func:`resume_plan`): the path is not read.

    ``noise``: an A/A calibration of this hardware class and suite whose between-run noise the speed
    intervals include (see :func:`analyze`; checked before any engine starts).

    ``keep``: engines kept running between runs in this process (:class:`KeptEngines`, local
    executor only): an engine with the same vLLM arguments and environment as one a previous
    run left there is taken over instead of started, and this run's engines stay there after it.

    ``executor`` (local | ray), ``ray_address`` and ``max_parallel_engines``
    override the suite's ``executor:`` section. ``timeline`` records where the
    time goes (:mod:`specbench.execution.timeline`; a new one, started now, when None); its
    breakdown goes into the manifest's ``time_breakdown``. Pass the same one to
    :func:`report` to add the reports to it. Returns the run directory.

    SIGINT or SIGTERM (in the main thread) stops the run: every engine
    process is ended, the records so far are kept, the manifest says
    ``"status": "interrupted"`` with the signal, and
    :class:`~specbench.execution.interrupt.StopRequested` (with ``run_dir`` and the
    number of requests recorded) leaves this function; ``resume=run_dir``
    continues.
    """
    if not isinstance(suite, RunPlan):
        suite = resume_plan(resume) if resume is not None else plan(suite, num_speculative_tokens)
    elif resume is not None and suite.resume != Path(resume):
        raise RunRefused([f"--resume {resume}: the plan given is not that run's (plan it with resume_plan)"])
    with stop_on_signals():
        return _run(suite, out=out, limit=limit, progress=progress, platform=platform,
                    allow_code_exec=allow_code_exec, executor=executor, ray_address=ray_address,
                    max_parallel_engines=max_parallel_engines,
                    timeline=timeline if timeline is not None else Timeline(), keep=keep, noise=noise)


def _run(
    planned: RunPlan,
    *,
    out: Path | None,
    limit: int | None,
    progress: Progress | None,
    platform: str | None,
    allow_code_exec: bool | None,
    executor: str | None,
    ray_address: str | None,
    max_parallel_engines: int | None,
    timeline: Timeline,
    keep: KeptEngines | None = None,
    noise: Path | None = None,
    round_hook: Any = None,
) -> Path:
    platform = platform or detect_platform()
    suite, plan, resume = planned.suite, planned.plan, planned.resume  # the suite: stored, never decided on again
    if resume is not None:
        run_dir = resume
        manifest = resume_manifest(rundir.read_manifest(run_dir), suite, planned.sources)
        run_id = manifest.run_id
        limit = manifest.limit if limit is None else limit
    else:
        run_id = rundir.new_run_id()
        run_dir = results_root(out) / suite.name / run_id
        manifest = new_run_manifest(suite, plan, run_id, platform, limit)
    if noise is not None:
        try:
            run_noise.run_speed_noise(run_dir, manifest, noise)
        except ValueError as exc:  # NoiseError: another hardware class or suite, or not a calibration
            raise RunRefused([str(exc)]) from exc
    spec = plan.decisions().executor
    kind = executor or spec.kind
    try:
        runs_on = make_executor(kind, ray_address=ray_address or spec.ray_address,
                                max_parallel=max_parallel_engines or spec.max_parallel_engines, kept=keep,
                                round_hook=round_hook)
    except Exception as exc:  # noqa: BLE001 - no Ray, no cluster at that address: bad input, before any engine
        raise RunRefused([f"executor {kind}: {type(exc).__name__}: {exc}"]) from exc
    rundir.make_run_dir(run_dir, resume=resume is not None)
    manifest.executors = [*manifest.executors, kind]
    manifest.status, manifest.interrupted_by = "running", None
    rundir.write_manifest(run_dir, manifest)
    runner = Runner(plan, run_dir, run_id, limit=limit, progress=progress, platform=platform, executor=runs_on)
    with timeline.span("assets"):
        _build_zoo(plan)
    try:
        runner.run()
        manifest.status = "complete"
    except StopRequested as stop:
        _stopped(stop, run_dir, manifest)
        raise
    finally:
        finish_manifest(manifest, runner.engine_status)
        rundir.write_manifest(run_dir, manifest)
    timeline.extend(recorded_engine_spans(runner.phases, run_dir, plan, since=timeline.started))
    try:
        analyze(run_dir, allow_code_exec=allow_code_exec, timeline=timeline, noise=noise)
    except StopRequested as stop:  # every cell ran: a resume only analyzes
        stop.run_dir, stop.requests = run_dir, len(rundir.read_requests(run_dir))
        raise
    record_time_breakdown(run_dir, timeline, manifest)
    return run_dir


def _build_zoo(plan: Plan) -> None:
    """Build (or find cached) the CPU zoo the plan's engines use, before any engine starts, so the time
    line names it. A failure is left to the engines that need it, which report it as they always have."""
    from specbench.engines.factory import uses_zoo
    from specbench.zoo.assets import ensure_assets_for

    for mode in dict.fromkeys(e.target.assets for e in plan.engines if uses_zoo(e)):
        try:
            ensure_assets_for(mode)
        except Exception:  # noqa: BLE001 - see the docstring
            pass


def _stopped(stop: StopRequested, run_dir: Path, manifest: RunManifest) -> None:
    """A run stopped by a signal: no engine process left, the manifest says so, the message has its numbers.

    The runner's own clean-up (the job's ``finally`` blocks, the executor's
    shutdown) closed the engines and the record files; whatever a stop in the
    middle of an engine's start or close left in this process is killed here.
    """
    from specbench.engines.procs import end_all, end_resource_tracker

    end_all()
    end_resource_tracker()
    manifest.status, manifest.interrupted_by = "interrupted", stop.signame
    stop.run_dir = run_dir
    stop.requests = len(rundir.read_requests(run_dir))


def analyze(run_dir: Path, *, allow_code_exec: bool | None = None, timeline: Timeline | None = None,
            noise: Path | None = None) -> RunSummary:
    """Rebuild ``summary.json`` from the run's raw records.

    ``allow_code_exec`` overrides the suite's ``scoring.allow_code_exec``
    (HumanEval runs generated code, in the sandbox, only when allowed).
    ``timeline`` gets a scoring and an analysis span. ``noise``: an A/A calibration
    (:mod:`specbench.results.noise_calibration`) whose between-run noise the speed intervals then include; it
    must be of the run's hardware class and suite (else :class:`NoiseError`). Without one, the
    calibration kept beside the run (``results/<suite>/noise.json``) is used when it applies.
    """
    timeline = timeline if timeline is not None else Timeline()
    with timeline.span("analysis"):
        return _analyze(Path(run_dir), allow_code_exec, timeline, noise)


def _analyze(run_dir: Path, allow_code_exec: bool | None, timeline: Timeline, noise: Path | None = None) -> RunSummary:
    """Read the run directory, score, run the equivalence tests; :func:`summarize_run` does the rest."""
    from specbench.analysis.equivalence import run_equivalence
    from specbench.analysis.pipeline import summarize_run
    from specbench.scoring.apply import score_run

    manifest = rundir.read_manifest(run_dir)
    speed_noise, noise_note = run_noise.run_speed_noise(run_dir, manifest, noise)
    cells = manifest.plan.cells if manifest.plan is not None else []
    torn: list[str] = []  # torn last lines of interrupted writes, "file:line: …"
    every = rundir.read_requests(run_dir, torn, speed_rounds=True)
    requests = [r for r in every if not r.speed_only]  # the suite's single pass; the headline's rounds besides
    cell_records = rundir.read_cells(run_dir, torn)
    with timeline.span("scoring"):
        scores, notes = score_run(run_dir, manifest, cells, requests, allow_code_exec, torn)
    prompt_references = {p.prompt_id: p.reference for p in rundir.read_prompts(run_dir)}
    equivalence = run_equivalence(run_dir, manifest, cells, requests, torn)  # may add torn lines of its own file
    summary = summarize_run(manifest, cells, cell_records, requests, scores=scores, scoring_notes=notes,
                            prompt_references=prompt_references, prompt_categories=rundir.prompt_categories(run_dir),
                            equivalence=equivalence, torn_lines=torn, speed_noise=speed_noise,
                            speed_noise_note=noise_note, speed_rounds=[r for r in every if r.speed_only])
    rundir.write_summary(run_dir, summary)
    if any(g.schedule is not None for g in summary.groups):  # a method ran with a schedule: checked on the engine
        from specbench.analysis.k_schedule import schedule_run
        from specbench.results.schedule_file import schedule_path, write_schedule

        with timeline.span("analysis"):
            write_schedule(schedule_path(run_dir), schedule_run(summary, requests))
    return summary


def load_summary(run_dir: Path) -> RunSummary:
    """The run's ``summary.json`` (rebuilt by :func:`analyze` when it has none yet)."""
    if not rundir.has_summary(run_dir):
        return analyze(Path(run_dir))
    return rundir.read_summary(run_dir)


def report(run_dir: Path, out_dir: Path | None = None, *, timeline: Timeline | None = None,
           summary: RunSummary | None = None) -> dict[str, Path]:
    """Write the markdown and HTML reports of a run (``summary``: its summary, when the caller has it).

    With the ``timeline`` of the :func:`run` that made it, the reports' time goes into the manifest's
    ``time_breakdown`` (the reports themselves show the breakdown up to the analysis)."""
    from specbench.report import write_reports

    run_dir = Path(run_dir)
    summary = summary if summary is not None else load_summary(run_dir)
    out_dir = out_dir or rundir.reports_dir_for(run_dir)
    if timeline is None:
        return write_reports(run_dir, out_dir, summary=summary)
    manifest = rundir.read_manifest(run_dir)
    with timeline.span("reports"):
        paths = write_reports(run_dir, out_dir, summary=summary, manifest=manifest)
    manifest.set_time(timeline.spans or [],
                      timeline.breakdown(notes=manifest.time_breakdown.notes if manifest.time_breakdown else None))
    rundir.write_manifest(run_dir, manifest)
    return paths


def run_time_line(run_dir: Path) -> str | None:
    """Where a run's wall time went, in one line (its manifest's ``time_breakdown``; None without one)."""
    from specbench.report.terminal import time_line

    return time_line(rundir.read_manifest(run_dir).time_breakdown)


def schedule_markdown(made: ScheduleFile) -> str:
    """A schedule file's tables as Markdown (what ``specbench schedule`` prints)."""
    from specbench.report.schedule_section import render

    return render(made)


def schedule(run_dir: Path, out: Path | None = None) -> tuple[ScheduleFile, Path]:
    """Write a run's schedule file (default ``RUN_DIR/schedule.json``): per method and workload, the K
    sweep predicted from its largest K, the step-time model and ``num_speculative_tokens_per_batch_size``
    with its evidence (:mod:`specbench.analysis.k_schedule`); returns it and where it went."""
    from specbench.analysis.k_schedule import schedule_run
    from specbench.results.schedule_file import schedule_path, write_schedule

    run_dir = Path(run_dir)
    made = schedule_run(load_summary(run_dir), rundir.read_requests(run_dir))
    return made, write_schedule(out if out is not None else schedule_path(run_dir), made)


# ---------------------------------------------------------------------------
# across runs: compare, gate, history, trend; the tiny zoo


class InputError(SpecbenchError, ValueError):
    """Bad input to a command that reads stored runs, rules or the history that no stage named
    (a missing file, a malformed value; the CLI exits 2 with it, as with every :class:`SpecbenchError`)."""


class GateReport(NamedTuple):
    markdown: str
    exit_code: int  # 0 pass, 1 regression, 2 bad input, 3 nothing measured / run errors


def compare(base_run: Path, new_run: Path, *, speed_noise_floor_pct: float | None = None) -> str:
    """Each metric of the groups two runs share, base → new, as Markdown (see
    :func:`specbench.regression.run_diff.compare_runs` for the tests)."""
    from specbench.regression.run_diff import compare_runs, render_comparison_markdown

    base, new = load_summary(base_run), load_summary(new_run)
    return render_comparison_markdown(compare_runs(base, new, speed_noise_floor_pct=speed_noise_floor_pct))


def gate(new_run: Path, baseline: str, *, rules: Path | None = None, db: str | None = None,
         noise: Path | None = None) -> GateReport:
    """The CI regression gate of ``new_run`` against ``baseline``: a stored run directory, a JSON of
    expected values, or ``history[:N]`` (the median of the suite's last N runs on this hardware
    class in the history ``db``). ``noise``: an A/A calibration of speed noise on the new run's
    hardware class (:mod:`specbench.regression.calibrate_noise`); without one, the calibration the new run
    was analysed with (``specbench calibrate``, then runs beside it); with neither, speed against a
    single run is not gated."""
    from specbench.regression.gate import evaluate_gate
    from specbench.regression.gate_baseline import load_baseline
    from specbench.regression.gate_history import evaluate_history_gate, history_window
    from specbench.regression.gate_rules import check_rule_categories, load_rules
    from specbench.regression.history import History
    from specbench.report.gate_verdict import render_gate
    from specbench.results.noise_calibration import check_applies, load_noise

    window = history_window(baseline)
    try:
        rule_set = load_rules(rules)
        new = load_summary(new_run)
        check_rule_categories(rule_set, rules, new)
        cal = new.extra.speed_noise  # the calibration the new run was analysed with, if any
        if noise is not None:
            cal = load_noise(noise)
            check_applies(cal, rundir.read_manifest(new_run).hardware_class, new.suite_name, noise)
        if window is None:
            result = evaluate_gate(new, load_baseline(Path(baseline)), rule_set, noise=cal)
        else:
            with History(db) as hist:
                result = evaluate_history_gate(new, rundir.read_manifest(new_run), hist, window, rule_set, noise=cal)
    except SpecbenchError:
        raise
    except (FileNotFoundError, ValueError) as exc:  # a missing or malformed file no stage named
        raise InputError(str(exc)) from exc
    return GateReport(render_gate(result), result.exit_code)


class ABReport(NamedTuple):
    """What ``specbench ab`` found: the run, its A/B result, the Markdown summary and the exit code."""

    run_dir: Path
    result: ABResult
    markdown: str
    exit_code: int


class ABPlan(NamedTuple):
    """What ``specbench ab`` runs: the suite with each target once per arm, planned; the two arms; and,
    in words, how each engine pair shares the machine (``--dry-run`` prints it)."""

    plan: RunPlan
    arms: tuple[Arm, Arm]  # (arm A, arm B)
    residency: str


def ab_plan(suite: Suite | Path | str, a: str | Path | None = None, b: str | Path | None = None,
            platform: str | None = None) -> ABPlan:
    """Plan an A/B run (:func:`ab`) without starting anything. On a GPU an engine and its counterpart
    share it when both fit (``gpu_memory_utilization`` ≤ 0.5 each); otherwise they take turns with
    vLLM's sleep mode (:func:`~specbench.config.arms.with_sleep_mode`)."""
    from specbench.config.arms import ab_suite, load_arm, pairs_taking_turns, with_sleep_mode
    from specbench.report.ab_residency import ab_residency

    base = suite if isinstance(suite, Suite) else load_suite(suite)
    arm_a, arm_b = load_arm(a), load_arm(b)
    cpu = (platform or detect_platform()) == "cpu"
    turns = [] if cpu else pairs_taking_turns(base)  # on a GPU: the pairs that do not fit together
    if turns:
        base = with_sleep_mode(base, turns)
    return ABPlan(plan(ab_suite(base, arm_a, arm_b)), (arm_a, arm_b), ab_residency(base, turns, cpu))


def ab(suite: Suite | Path | str, a: str | Path | None = None, b: str | Path | None = None, *,
       out: Path | None = None, budget_s: float | None = None, rules: Path | None = None, strict: bool = False,
       progress: Progress | None = None, platform: str | None = None, timeline: Timeline | None = None) -> ABReport:
    """An A/B comparison in one job (docs/ab.md): every engine of ``suite`` once per arm (``a``, ``b``:
    an arm file, an interpreter, or None for this environment; :func:`specbench.config.arms.load_arm`),
    the arms alternating in balanced rounds (ABBA) with each engine and its counterpart resident
    together, undecided groups given more rounds until decided, the suite's ``rounds`` or ``budget_s``
    (seconds, from now). Writes ``ab.json`` and ``ab.md`` in the run directory."""
    from specbench.analysis.ab_decision import ABRule
    from specbench.analysis.ab_rounds import ab_result, arm_vllm_versions
    from specbench.execution.ab_round_decisions import RoundDecisions
    from specbench.regression.ab_gate import ab_outcome
    from specbench.regression.gate_rules import load_rules
    from specbench.report.ab_summary import render_ab_markdown
    from specbench.results.ab_file import write_ab

    planned, (arm_a, arm_b), _ = ab_plan(suite, a, b, platform)
    gate_rules = load_rules(rules).ab
    cap = planned.suite.instances if planned.suite.instances > 1 else planned.suite.rounds  # the rule's units
    rule = ABRule(margin=gate_rules.margin, alpha=gate_rules.alpha, min_rounds=min(gate_rules.min_rounds, cap),
                  max_rounds=cap, planned_rounds=min(gate_rules.min_rounds, cap))
    decisions = RoundDecisions(rule, gate_rules.metrics, budget_s)
    with stop_on_signals():
        run_dir = _run(planned, out=out, limit=None, progress=progress, platform=platform, allow_code_exec=None,
                       executor="local", ray_address=None, max_parallel_engines=None,
                       timeline=timeline if timeline is not None else Timeline(), round_hook=decisions)
    arms = {"a": arm_a.describe(), "b": arm_b.describe()}
    for arm, version in arm_vllm_versions(rundir.read_manifest(run_dir)).items():
        arms[arm] += f" (vLLM {version})"
    result = ab_result(rundir.read_requests(run_dir), rundir.read_cells(run_dir), rule, gate_rules.metrics,
                       arms=arms, budget_s=budget_s,
                       budget_ended=decisions.budget_ended)
    outcome = ab_outcome(result, gate_rules, strict=strict)
    md = render_ab_markdown(result, outcome, planned.suite.name)
    write_ab(run_dir, result, md)
    return ABReport(run_dir, result, md, outcome.exit_code)


def calibrate(run_dirs: list[Path], out: Path | None = None) -> tuple[NoiseCalibration, Path]:
    """An A/A noise calibration from ≥ 2 finished identical-code runs of one suite on one hardware
    class (:func:`specbench.regression.calibrate_noise.aa_noise_calibration`), written to ``out`` (default: ``noise.json``
    beside the runs, where later runs of the suite find it). Returns (calibration, path)."""
    from specbench.regression.calibrate_noise import aa_noise_calibration
    from specbench.results.noise_calibration import NOISE_FILE, save_noise

    classes = {rundir.read_manifest(d).hardware_class for d in run_dirs}
    if len(classes) != 1:
        raise NoiseError(f"a calibration needs runs of one hardware class, got {sorted(classes)}")
    summaries = [load_summary(d) for d in run_dirs]  # values only: a calibration a run was analysed with is moot
    cal = aa_noise_calibration(summaries, classes.pop())
    parents = {Path(d).resolve().parent for d in run_dirs}
    path = out if out is not None else (parents.pop() if len(parents) == 1 else Path(".")) / NOISE_FILE
    save_noise(cal, path)
    return cal, path


def history_add(run_dirs: list[Path], db: str | None = None) -> Iterator[AddResult]:
    """Store runs' metrics and context in the history, one result per run as it is stored (a run
    without ``summary.json`` is analyzed first; a stored run is left unchanged)."""
    from specbench.regression.history import History

    try:
        with History(db) as hist:
            for d in run_dirs:
                if not rundir.has_summary(d):
                    analyze(d)  # a run without its summary yet: rebuild it from the records
                yield hist.add_run(d)
    except SpecbenchError:
        raise
    except ValueError as exc:  # a malformed stored value no stage named
        raise InputError(str(exc)) from exc


def history_runs(suite: str | None = None, db: str | None = None) -> list[RunInfo]:
    """The stored runs (of ``suite``), oldest first."""
    from specbench.regression.history import History

    with History(db) as hist:
        return hist.runs(suite=suite)


def trend(out: Path, suite: str | None = None, db: str | None = None) -> dict[str, dict[str, Path]]:
    """Write every metric of every group over the stored runs, one Markdown and HTML page per suite
    (and hardware class): {page name: {"markdown": path, "html": path}}."""
    from specbench.regression.history import History
    from specbench.report.trend import write_trend

    with History(db) as hist:
        pages = write_trend(hist, out, suite)
    if not pages:
        raise InputError(f"no stored runs{f' of suite {suite!r}' if suite else ''}: add some with `specbench history add`")
    return pages


def assets(cache_dir: Path | None = None, *, train: bool = False, quick: bool = False) -> TinyAssets:
    """The tiny local target and speculators, built (``train``: trained; ``quick``: for seconds) or
    found in the cache."""
    from specbench.zoo.assets import ensure_assets

    return ensure_assets(cache_dir, train=train or quick, quick=quick)
