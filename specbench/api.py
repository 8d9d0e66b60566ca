"""The Python API: validate / plan / run / analyze / report.

Each CLI command calls one function here. ``analyze`` rebuilds
``summary.json`` from the raw records alone, so every number in a report can
be recomputed without an engine.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import ValidationError

from specbench import datasets
from specbench.analysis.timing import Timeline
from specbench.config.plan import Cell, Plan, cell_summary, expand, with_decisions
from specbench.config.suite import EquivalenceSpec, Suite, SuiteError, load_suite
from specbench.engines.factory import resolve_engine
from specbench.engines.kept import KeptEngines as KeptEngines  # api.run(keep=KeptEngines())
from specbench.engines.vllm_args import vllm_serve_command
from specbench.engines.vllm_patches import PATCHES as ENGINE_PATCHES
from specbench.execution.driver import Progress, Runner, detect_platform
from specbench.execution.driver import RunRefused as RunRefused  # the CLI reports it as bad input
from specbench.execution.executors import make_executor
from specbench.execution.interrupt import StopRequested, stop_on_signals
from specbench.results import rundir
from specbench.results.migrations import MANIFEST_SCHEMA_VERSION, hardware_class
from specbench.results.noise import NoiseCalibration
from specbench.results.noise import NoiseError as NoiseError  # the CLI reports it as bad input
from specbench.results.parts import Equivalence
from specbench.results.summary import RunSummary
from specbench.settings import settings

if TYPE_CHECKING:
    from specbench.regression.history import AddResult, RunInfo
    from specbench.zoo.assets import TinyAssets


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


def with_ks(suite: Suite, ks: list[int] | None) -> Suite:
    """The suite with every speculating method at the K values ``ks`` (``--num-speculative-tokens 1,3,5``);
    raises :class:`SuiteError` when a K is beyond a method's limit."""
    if not ks:
        return suite
    from specbench.config.plan import with_ks as replace_ks
    from specbench.config.suite import check_semantics

    out = replace_ks(suite, ks)
    out.source_path = suite.source_path
    base = Path(suite.source_path).parent if suite.source_path else Path.cwd()
    problems = [msg for loc, msg in check_semantics(out, base) if "num_speculative_tokens" in loc]
    if problems:
        raise SuiteError([f"--num-speculative-tokens: {m}" for m in dict.fromkeys(problems)])
    return out


def dry_run(suite: Suite, platform: str | None = None, assets_factory: Any = None) -> list[dict[str, Any]]:
    """Every engine's exact configuration, without starting anything (``assets_factory``:
    the tiny zoo to resolve ``model: tiny`` with, as in :func:`~specbench.engines.factory.resolve_engine`)."""
    platform = platform or detect_platform()
    plan = expand(suite)
    out = []
    for cfg in plan.engines:
        res = resolve_engine(cfg, platform, assets_factory)
        cells = plan.cells_for(cfg.key)
        out.append(
            {
                "engine": cfg.key,
                "kind": cfg.target.engine,
                "method": cfg.method.method,
                "speculative_config": res.engine_kwargs.get("speculative_config"),
                "llm_kwargs": res.engine_kwargs,
                "env": res.env,
                "server_command": vllm_serve_command(cfg, res.engine_kwargs, platform, res.env),
                "cells": len(cells),
                "cell_lines": cell_summary(cells, suite),
                "references": [
                    r.model_dump(mode="json") for r in suite.references
                    if r.target == cfg.target.name
                    and r.method in (cfg.method.label, cells[0].method_family if cells else cfg.method.label)
                    and r.k in (None, cfg.method.num_speculative_tokens)
                ],
            }
        )
    return out


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
    from specbench.analysis.lossless import TIE_TOLERANCE_BY_DTYPE, min_tokens_for_tv

    eq = suite.equivalence
    lines = []
    if eq.greedy:
        if eq.tie_tolerance is not None:
            tol = f"{eq.tie_tolerance:g} nats (equivalence.tie_tolerance)"
        else:
            tol = "from each engine's dtype (" + ", ".join(f"{k} {v:g}" for k, v in TIE_TOLERANCE_BY_DTYPE.items()) + " nats)"
        lines.append(f"greedy: token identity vs the baseline, top-{eq.logprobs} logprobs; near-tie tolerance {tol}")
    s = eq.sampled
    if s is not None:
        need = min_tokens_for_tv(s.target_tv, s.alpha, s.power, n_tests=3)
        lines.append(f"sampled: T={s.temperature:g}, PIT vs the plain target (teacher forcing); alpha {s.alpha:g}, "
                     f"detects a per-token TV of {s.target_tv:g} with power {s.power:g} from >= {need} tokens per method")
    return lines


def results_root(out: Path | None) -> Path:
    return Path(out) if out is not None else Path.cwd() / "results"


def _manifest(suite: Suite, plan: Plan, run_id: str, platform: str, limit: int | None) -> dict[str, Any]:
    src = Path(suite.source_path) if suite.source_path else None
    hw, versions = rundir.hardware(), rundir.package_versions()
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "run_id": run_id,
        "suite_name": suite.name,
        "suite_path": str(src) if src else None,
        "suite": suite.model_dump(mode="json"),
        "plan": plan.model_dump(mode="json"),
        "limit": limit,
        "seed": suite.sampling.seed,
        "platform": platform,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": rundir.git_commit(src.parent if src else None),
        "versions": versions,
        "hardware": hw,
        "hardware_class": hardware_class(hw),
        "specbench_version": versions.get("specbench"),
        "command": settings().command or shlex.join(sys.argv),
        "datasets": {d.name: datasets.source_of(d, src.parent if src else Path.cwd()) for d in suite.datasets},
        "engine_patches": {
            t.name: [{"name": n, "summary": ENGINE_PATCHES[n].summary} for n in t.engine_patches]
            for t in suite.targets
            if t.engine_patches and t.engine != "reference"
        },
    }


def run(
    suite_path: Path,
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

    ``noise``: an A/A calibration of this hardware class and suite whose between-run noise the speed
    intervals include (see :func:`analyze`; checked before any engine starts).

    ``keep``: engines kept running between runs in this process (:class:`KeptEngines`, local
    executor only): an engine with the same vLLM arguments and environment as one a previous
    run left there is taken over instead of started, and this run's engines stay there after it.

    ``executor`` (local | ray), ``ray_address`` and ``max_parallel_engines``
    override the suite's ``executor:`` section. ``timeline`` records where the
    time goes (:mod:`specbench.analysis.timing`; a new one, started now, when None); its
    breakdown goes into the manifest's ``time_breakdown``. Pass the same one to
    :func:`report` to add the reports to it. Returns the run directory.

    SIGINT or SIGTERM (in the main thread) stops the run: every engine
    process is ended, the records so far are kept, the manifest says
    ``"status": "interrupted"`` with the signal, and
    :class:`~specbench.execution.interrupt.StopRequested` (with ``run_dir`` and the
    number of requests recorded) leaves this function; ``resume=run_dir``
    continues.
    """
    with stop_on_signals():
        return _run(suite_path, out=out, limit=limit, resume=resume, progress=progress, platform=platform,
                    allow_code_exec=allow_code_exec, num_speculative_tokens=num_speculative_tokens,
                    executor=executor, ray_address=ray_address, max_parallel_engines=max_parallel_engines,
                    timeline=timeline if timeline is not None else Timeline(), keep=keep, noise=noise)


def _run(
    suite_path: Path,
    *,
    out: Path | None,
    limit: int | None,
    resume: Path | None,
    progress: Progress | None,
    platform: str | None,
    allow_code_exec: bool | None,
    num_speculative_tokens: list[int] | None,
    executor: str | None,
    ray_address: str | None,
    max_parallel_engines: int | None,
    timeline: Timeline,
    keep: KeptEngines | None = None,
    noise: Path | None = None,
) -> Path:
    platform = platform or detect_platform()
    if resume is not None:
        run_dir = Path(resume)
        manifest = rundir.read_manifest(run_dir)
        suite = load_suite(manifest.get("suite_path") or suite_path)
        plan = with_decisions(Plan.model_validate(manifest["plan"]), suite)
        run_id = manifest["run_id"]
        limit = manifest.get("limit") if limit is None else limit
        manifest.setdefault("resumed_at", []).append(dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    else:
        suite = with_ks(load_suite(suite_path), num_speculative_tokens)
        plan = expand(suite)
        run_id = rundir.new_run_id()
        run_dir = results_root(out) / suite.name / run_id
        manifest = _manifest(suite, plan, run_id, platform, limit)
    if noise is not None:
        try:
            _speed_noise(run_dir, manifest, noise)
        except ValueError as exc:  # NoiseError: another hardware class or suite, or not a calibration
            raise RunRefused([str(exc)]) from exc
    spec = suite.executor
    kind = executor or spec.kind
    try:
        runs_on = make_executor(kind, ray_address=ray_address or spec.ray_address,
                                max_parallel=max_parallel_engines or spec.max_parallel_engines, kept=keep)
    except Exception as exc:  # noqa: BLE001 - no Ray, no cluster at that address: bad input, before any engine
        raise RunRefused([f"executor {kind}: {type(exc).__name__}: {exc}"]) from exc
    run_dir.mkdir(parents=True, exist_ok=resume is not None)
    manifest.setdefault("executors", []).append(kind)
    manifest["status"] = "running"
    manifest.pop("interrupted_by", None)
    rundir.write_json(run_dir / rundir.MANIFEST, manifest)
    runner = Runner(plan, run_dir, run_id, limit=limit, progress=progress, platform=platform, executor=runs_on)
    with timeline.span("assets"):
        _build_zoo(plan)
    try:
        runner.run()
        manifest["status"] = "complete"
    except StopRequested as stop:
        _stopped(stop, run_dir, manifest)
        raise
    finally:
        earlier = {e.get("key"): e for e in manifest.get("engines") or []}
        manifest["engines"] = [
            # an engine whose cells all finished before a resume keeps what it recorded then
            {**earlier[k], "status": "done earlier"} if v == {"status": "done earlier"} and k in earlier else {"key": k, **v}
            for k, v in runner.engine_status.items()
        ]
        manifest["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        rundir.write_json(run_dir / rundir.MANIFEST, manifest)
    timeline.extend(engine_spans_of(runner.phases, run_dir, plan, since=timeline.started))
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


def _stopped(stop: StopRequested, run_dir: Path, manifest: dict[str, Any]) -> None:
    """A run stopped by a signal: no engine process left, the manifest says so, the message has its numbers.

    The runner's own clean-up (the job's ``finally`` blocks, the executor's
    shutdown) closed the engines and the record files; whatever a stop in the
    middle of an engine's start or close left in this process is killed here.
    """
    from specbench.engines.procs import end_all, end_resource_tracker

    end_all()
    end_resource_tracker()
    manifest["status"] = "interrupted"
    manifest["interrupted_by"] = stop.signame
    stop.run_dir = run_dir
    stop.requests = len(rundir.read_requests(run_dir))


def engine_spans_of(phases: list[Any], run_dir: Path, plan: Plan, *, since: float) -> list[Any]:
    """The engine jobs' timed phases as timeline spans: cells split by group (their cells' wall
    times in ``cells.jsonl``), teacher forcing (its engine's start included) shared by the sampled
    groups of its target."""
    from specbench.analysis.timing import parse_time, spans_from_phases

    records = [r for r in rundir.read_cells(run_dir) if (parse_time(r.finished_at) or 0.0) >= since - 1] \
        if (run_dir / rundir.CELLS).exists() else []
    target_of = {e.key: e.target.name for e in plan.engines}
    sampled: dict[str, list[str]] = {}
    for c in plan.cells:
        if c.temperature > 0:
            sampled.setdefault(c.target, [])
            if c.group_id not in sampled[c.target]:
                sampled[c.target].append(c.group_id)
    keys = {p.job_id for p in phases}
    teacher_forcing = {k for k in keys if k not in target_of}  # "<target>--teacher-forcing"
    return spans_from_phases(phases, records, {c.cell_id: c.group_id for c in plan.cells},
                             {k: sampled.get(target_of.get(k, k.removesuffix("--teacher-forcing")), []) for k in keys},
                             teacher_forcing)


def record_time_breakdown(run_dir: Path, timeline: Timeline, manifest: dict[str, Any] | None = None) -> None:
    """Write the timeline's breakdown (wall: from its start to now) into ``manifest.json``.

    Engine starts, warmups, cells and teacher forcing the runner did not record are estimated from
    this session's files (:func:`specbench.analysis.timing_estimate.engine_spans`)."""
    from specbench.analysis.timing_estimate import engine_spans

    manifest = manifest if manifest is not None else rundir.read_manifest(run_dir)
    notes = []
    if not timeline.has("cells"):
        timeline.extend(engine_spans(run_dir, since=timeline.started))
        notes.append("engine starts, warmups, cells and teacher forcing: estimated from cells.jsonl and the engine logs")
    if manifest.get("resumed_at"):
        notes.append("a resumed run: the last session only")
    manifest["timeline"] = timeline.to_json()
    manifest["time_breakdown"] = timeline.breakdown(notes=notes).model_dump(mode="json")
    rundir.write_json(Path(run_dir) / rundir.MANIFEST, manifest)


def analyze(run_dir: Path, *, allow_code_exec: bool | None = None, timeline: Timeline | None = None,
            noise: Path | None = None) -> RunSummary:
    """Rebuild ``summary.json`` from the run's raw records.

    ``allow_code_exec`` overrides the suite's ``scoring.allow_code_exec``
    (HumanEval runs generated code, in the sandbox, only when allowed).
    ``timeline`` gets a scoring and an analysis span. ``noise``: an A/A calibration
    (:mod:`specbench.results.noise`) whose between-run noise the speed intervals then include; it
    must be of the run's hardware class and suite (else :class:`NoiseError`). Without one, the
    calibration kept beside the run (``results/<suite>/noise.json``) is used when it applies.
    """
    timeline = timeline if timeline is not None else Timeline()
    with timeline.span("analysis"):
        return _analyze(Path(run_dir), allow_code_exec, timeline, noise)


def _speed_noise(run_dir: Path, manifest: dict[str, Any], noise: Path | None) -> tuple[NoiseCalibration | None, str | None]:
    """(the calibration the run's speed intervals include or None, why one found was not used).

    ``noise`` when given (it must apply); else ``noise.json`` beside the run; else the suite's
    ``speed_noise`` file, each when it is of the run's hardware class and suite."""
    from specbench.config.suite import resolve_path
    from specbench.results.noise import applying, check_applies, find_noise, load_noise

    hw, suite = manifest.get("hardware_class"), manifest["suite_name"]
    if noise is None:
        cal, why = find_noise(run_dir, hw, suite)
        named, suite_path = (manifest.get("suite") or {}).get("speed_noise"), manifest.get("suite_path")
        if cal is not None or not named or not suite_path:
            return cal, why
        cal, why_suite = applying(resolve_path(named, Path(suite_path).parent), hw, suite)
        return cal, "; ".join(filter(None, [why, why_suite])) or None
    cal = load_noise(noise)
    check_applies(cal, hw, suite, noise)
    return cal, None


def _analyze(run_dir: Path, allow_code_exec: bool | None, timeline: Timeline, noise: Path | None = None) -> RunSummary:
    """Read the run directory, score, run the equivalence tests; :func:`summarize_run` does the rest."""
    from specbench.analysis.pipeline import summarize_run

    manifest = rundir.read_manifest(run_dir)
    speed_noise, noise_note = _speed_noise(run_dir, manifest, noise)
    cells = [Cell.model_validate(c) for c in manifest["plan"]["cells"]]
    torn: list[str] = []  # torn last lines of interrupted writes, "file:line: …"
    requests = rundir.read_requests(run_dir, torn)
    cell_records = rundir.read_cells(run_dir, torn)
    with timeline.span("scoring"):
        scores, notes = _scores(run_dir, manifest, cells, requests, allow_code_exec, torn)
    prompt_references = {str(o.get("prompt_id")): o.get("reference") for o in rundir.iter_jsonl(run_dir / rundir.PROMPTS)} \
        if (run_dir / rundir.PROMPTS).exists() else {}
    equivalence = _equivalence(run_dir, manifest, cells, requests, torn)  # may add torn lines of its own file
    summary = summarize_run(manifest, cells, cell_records, requests, scores=scores, scoring_notes=notes,
                            prompt_references=prompt_references, prompt_categories=rundir.prompt_categories(run_dir),
                            equivalence=equivalence, torn_lines=torn, speed_noise=speed_noise,
                            speed_noise_note=noise_note)
    rundir.write_json(run_dir / rundir.SUMMARY, summary.model_dump(mode="json"))
    return summary


def _equivalence(
    run_dir: Path, manifest: dict[str, Any], cells: list[Cell], requests: list, torn: list[str] | None = None
) -> dict[str, Equivalence]:
    from specbench.execution.teacher_forcing import equivalence_summaries

    try:
        spec = EquivalenceSpec.model_validate(manifest["suite"].get("equivalence") or {})
    except ValidationError:
        spec = EquivalenceSpec()  # a manifest written before the section was typed
    return equivalence_summaries(run_dir, cells, requests, torn, engine_dtypes=engine_dtypes(manifest), spec=spec)


def engine_dtypes(manifest: dict[str, Any]) -> dict[str, str | None]:
    """Engine key → the dtype its logits were computed in: as the engine reported it
    once started (vLLM's resolution of "auto"), else the target's ``dtype``."""
    out: dict[str, str | None] = {
        e["key"]: (e.get("target") or {}).get("dtype") for e in (manifest.get("plan") or {}).get("engines") or []
    }
    for e in manifest.get("engines") or []:
        reported = (e.get("describe") or {}).get("dtype")
        if reported and e.get("key"):
            out[e["key"]] = reported
    return out


def _scores(
    run_dir: Path,
    manifest: dict[str, Any],
    cells: list[Cell],
    requests: list,
    allow_code_exec: bool | None,
    torn: list[str] | None = None,
) -> tuple[dict, list[str]]:
    from specbench.scoring.apply import score_requests

    prompts = list(rundir.iter_jsonl(run_dir / rundir.PROMPTS, torn))
    if not prompts:
        return {}, []
    scoring = manifest["suite"].get("scoring") or {}
    allow = scoring.get("allow_code_exec", False) if allow_code_exec is None else allow_code_exec
    cached = {(o["cell_id"], o["prompt_id"], o["sample_index"]): o["score"]
              for o in rundir.iter_jsonl(run_dir / rundir.SCORES, torn)}
    scores, notes = score_requests(
        requests,
        {c.cell_id: c.dataset for c in cells},
        {d["name"]: d["kind"] for d in manifest["suite"]["datasets"]},
        {(p["dataset"], p["prompt_id"]): p.get("reference") for p in prompts},
        allow_code_exec=allow,
        workers=int(scoring.get("workers", 4)),
        timeout_s=float(scoring.get("timeout_s", 10.0)),
        cached=cached,
    )
    new = {k: v for k, v in scores.items() if k not in cached}
    if new:
        out = rundir.JsonlAppender(run_dir / rundir.SCORES)
        for (cid, pid, si), sc in new.items():
            out.append({"cell_id": cid, "prompt_id": pid, "sample_index": si, "score": sc})
        out.close()
    return scores, notes


def load_summary(run_dir: Path) -> RunSummary:
    p = Path(run_dir) / rundir.SUMMARY
    if not p.exists():
        return analyze(Path(run_dir))
    return RunSummary.load(json.loads(p.read_text()))


def report(run_dir: Path, out_dir: Path | None = None, *, timeline: Timeline | None = None) -> dict[str, Path]:
    """Write the markdown and HTML reports of a run.

    With the ``timeline`` of the :func:`run` that made it, the reports' time goes into the manifest's
    ``time_breakdown`` (the reports themselves show the breakdown up to the analysis)."""
    from specbench.report import write_reports

    run_dir = Path(run_dir)
    load_summary(run_dir)
    if timeline is None:
        return write_reports(run_dir, out_dir or rundir.reports_dir_for(run_dir))
    with timeline.span("reports"):
        paths = write_reports(run_dir, out_dir or rundir.reports_dir_for(run_dir))
    manifest = rundir.read_manifest(run_dir)
    manifest["timeline"] = timeline.to_json()
    manifest["time_breakdown"] = timeline.breakdown(notes=(manifest.get("time_breakdown") or {}).get("notes")).model_dump(
        mode="json")
    rundir.write_json(run_dir / rundir.MANIFEST, manifest)
    return paths


# ---------------------------------------------------------------------------
# across runs: compare, gate, history, trend; the tiny zoo


class InputError(ValueError):
    """Bad input to a command that reads stored runs, rules or the history (the CLI exits 2 with it)."""


class GateReport(NamedTuple):
    markdown: str
    exit_code: int  # 0 pass, 1 regression, 2 bad input, 3 nothing measured / run errors


def compare(base_run: Path, new_run: Path, *, speed_noise_floor_pct: float | None = None) -> str:
    """Each metric of the groups two runs share, base → new, as Markdown (see
    :func:`specbench.regression.run_diff.compare_runs` for the tests)."""
    from specbench.regression.run_diff import compare_runs, render_comparison_markdown

    try:
        base, new = load_summary(base_run), load_summary(new_run)
    except rundir.StoreError as exc:
        raise InputError(str(exc)) from exc
    return render_comparison_markdown(compare_runs(base, new, speed_noise_floor_pct=speed_noise_floor_pct))


def gate(new_run: Path, baseline: str, *, rules: Path | None = None, db: str | None = None,
         noise: Path | None = None) -> GateReport:
    """The CI regression gate of ``new_run`` against ``baseline``: a stored run directory, a JSON of
    expected values, or ``history[:N]`` (the median of the suite's last N runs on this hardware
    class in the history ``db``). ``noise``: an A/A calibration of speed noise on the new run's
    hardware class (:mod:`specbench.regression.noise`); without one, the calibration the new run
    was analysed with (``specbench calibrate``, then runs beside it); with neither, speed against a
    single run is not gated."""
    from specbench.regression.gate import (
        GateConfigError,
        check_rule_categories,
        evaluate_gate,
        load_baseline,
        load_rules,
        render_gate,
    )
    from specbench.regression.gate_history import evaluate_history_gate, history_window
    from specbench.regression.history import History, HistoryError
    from specbench.results.noise import check_applies, load_noise

    window = history_window(baseline)
    try:
        rule_set = load_rules(rules)
        new = load_summary(new_run)
        check_rule_categories(rule_set, rules, new)
        cal = new.extra.speed_noise  # the calibration the new run was analysed with, if any
        if noise is not None:
            cal = load_noise(noise)
            check_applies(cal, rundir.load_manifest(new_run).hardware_class, new.suite_name, noise)
        if window is None:
            result = evaluate_gate(new, load_baseline(Path(baseline)), rule_set, noise=cal)
        else:
            with History(db) as hist:
                result = evaluate_history_gate(new, rundir.load_manifest(new_run), hist, window, rule_set, noise=cal)
    except (GateConfigError, HistoryError, rundir.StoreError, FileNotFoundError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    return GateReport(render_gate(result), result.exit_code)


def calibrate(run_dirs: list[Path], out: Path | None = None) -> tuple[NoiseCalibration, Path]:
    """An A/A noise calibration from ≥ 2 finished identical-code runs of one suite on one hardware
    class (:func:`specbench.regression.noise.calibrate`), written to ``out`` (default: ``noise.json``
    beside the runs, where later runs of the suite find it). Returns (calibration, path)."""
    from specbench.regression.noise import calibrate as calibrate_runs
    from specbench.results.noise import NOISE_FILE, save_noise

    classes = {rundir.load_manifest(d).hardware_class for d in run_dirs}
    if len(classes) != 1:
        raise NoiseError(f"a calibration needs runs of one hardware class, got {sorted(classes)}")
    summaries = [load_summary(d) for d in run_dirs]  # values only: a calibration a run was analysed with is moot
    cal = calibrate_runs(summaries, classes.pop())
    parents = {Path(d).resolve().parent for d in run_dirs}
    path = out if out is not None else (parents.pop() if len(parents) == 1 else Path(".")) / NOISE_FILE
    save_noise(cal, path)
    return cal, path


def history_add(run_dirs: list[Path], db: str | None = None) -> Iterator[AddResult]:
    """Store runs' metrics and context in the history, one result per run as it is stored (a run
    without ``summary.json`` is analyzed first; a stored run is left unchanged)."""
    from specbench.regression.history import History, HistoryError

    try:
        with History(db) as hist:
            for d in run_dirs:
                if not (Path(d) / rundir.SUMMARY).exists():
                    analyze(d)  # a run without its summary yet: rebuild it from the records
                yield hist.add_run(d)
    except (HistoryError, rundir.StoreError, ValueError) as exc:
        raise InputError(str(exc)) from exc


def history_runs(suite: str | None = None, db: str | None = None) -> list[RunInfo]:
    """The stored runs (of ``suite``), oldest first."""
    from specbench.regression.history import History, HistoryError

    try:
        with History(db) as hist:
            return hist.runs(suite=suite)
    except HistoryError as exc:
        raise InputError(str(exc)) from exc


def trend(out: Path, suite: str | None = None, db: str | None = None) -> dict[str, dict[str, Path]]:
    """Write every metric of every group over the stored runs, one Markdown and HTML page per suite
    (and hardware class): {page name: {"markdown": path, "html": path}}."""
    from specbench.regression.history import History, HistoryError
    from specbench.report.trend import write_trend

    try:
        with History(db) as hist:
            pages = write_trend(hist, out, suite)
    except HistoryError as exc:
        raise InputError(str(exc)) from exc
    if not pages:
        raise InputError(f"no stored runs{f' of suite {suite!r}' if suite else ''}: add some with `specbench history add`")
    return pages


def assets(cache_dir: Path | None = None, *, train: bool = False, quick: bool = False) -> TinyAssets:
    """The tiny local target and speculators, built (``train``: trained; ``quick``: for seconds) or
    found in the cache."""
    from specbench.zoo.assets import ensure_assets

    return ensure_assets(cache_dir, train=train or quick, quick=quick)
