"""Spans of a run estimated from its files, for what no :class:`~specbench.execution.timeline.Timeline` recorded.

* measured cells: exact, from ``cells.jsonl`` (``finished_at`` − ``wall_time_s`` to ``finished_at``);
* an engine's start: from the end of the previous engine's last cell (its close included; for the
  first one, from ``prompts.jsonl`` written once the datasets are loaded) to its
  log's ``init engine … took`` line (vLLM); its warmup: from there to its first cell. An engine
  without such a line (the reference engine) counts the whole gap as its start;
* teacher forcing: from the last cell's end to the last write of ``equivalence.jsonl``;
* (:func:`run_spans` only) scoring, analysis and reports: from ``manifest.json``'s ``finished_at``
  and the files' modification times (``scores.jsonl``, ``summary.json``, the reports).

Timestamps in ``cells.jsonl`` and the engine logs have whole seconds: each estimated boundary is
within a second or so.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specbench.analysis.timing import Span, parse_time, spans_from_phases
from specbench.config.plan import Plan, group_id, key_target
from specbench.results import rundir
from specbench.results.manifest import RunManifest

#: vLLM V1's line at the end of its engine core's start ("init engine (profile, …) took 0.44 s").
READY = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[[^\]]*\] init engine\b")


def ready_times(log: str, year: int) -> list[float]:
    """When the engine whose log text is ``log`` was up, each time it started (seconds; the log's clock
    is taken as UTC)."""
    out = []
    for m in READY.finditer(log):
        mo, d, h, mi, s = (int(x) for x in m.groups())
        out.append(dt.datetime(year, mo, d, h, mi, s, tzinfo=dt.timezone.utc).timestamp())
    return out


def _gpus(manifest: RunManifest, target: str | None) -> int | None:
    if manifest.platform != "cuda":
        return None
    spec = next((t for t in manifest.suite.targets if t.name == target), None) if manifest.suite else None
    return int(spec.tensor_parallel_size or 1) if spec is not None else 1


def engine_spans(run_dir: Path, *, since: float | None = None, manifest: RunManifest | None = None) -> list[Span]:
    """Engine starts, warmups, cells and teacher forcing of the run (of its cells that ended after ``since``)."""
    run_dir = Path(run_dir)
    manifest = manifest if manifest is not None else rundir.read_manifest(run_dir)
    created = parse_time(manifest.created_at)
    origin = since if since is not None else created
    if origin is None:
        return []
    year = dt.datetime.fromtimestamp(origin, dt.timezone.utc).year
    plan_cells = {c.cell_id: c for c in manifest.plan.cells} if manifest.plan else {}
    target_of = {e.key: e.target.name for e in manifest.plan.engines} if manifest.plan else {}
    spans: list[Span] = []
    by_engine: dict[str, list[Span]] = {}
    for rec in rundir.read_cells(run_dir):
        end = parse_time(rec.finished_at)
        if rec.status != "ok" or rec.wall_time_s is None or end is None or end < origin - 1:
            continue
        c = plan_cells.get(rec.cell_id)
        gid = group_id(c.target, c.method, c.dataset, c.temperature, c.batch_size, c.request_rate) if c else None
        s = Span(phase="cells", start=end - rec.wall_time_s, end=end, engine=rec.engine_key,
                 groups=[gid] if gid else None, gpus=_gpus(manifest, target_of.get(rec.engine_key)))
        spans.append(s)
        by_engine.setdefault(rec.engine_key, []).append(s)
    prompts = rundir.file_mtime(run_dir, rundir.PROMPTS)  # written once the datasets are loaded, before any engine
    first_cell = min((s.start for s in spans), default=origin)
    prev = prompts if prompts is not None and origin <= prompts <= first_cell else origin
    for key, cells in by_engine.items():  # in the order the engines ran (cells.jsonl is appended)
        first = min(s.start for s in cells)
        gpus = _gpus(manifest, target_of.get(key))
        if first > prev:
            ready = [t for t in ready_times(rundir.read_engine_log(run_dir, key), year) if prev <= t <= first]
            up = ready[-1] if ready else first
            spans.append(Span(phase="engine_start", start=prev, end=up, engine=key, gpus=gpus))
            if up < first:
                spans.append(Span(phase="warmup", start=up, end=first, engine=key, gpus=gpus))
        prev = max(prev, max(s.end for s in cells))
    eq = rundir.file_mtime(run_dir, rundir.EQUIVALENCE)
    if by_engine and eq is not None and eq > prev:
        logs = [k for k in rundir.engine_log_keys(run_dir) if k.endswith("--teacher-forcing")]
        tf_key = logs[0] if len(logs) == 1 else None
        spans.append(Span(phase="teacher_forcing", start=prev, end=eq, engine=tf_key,
                          gpus=_gpus(manifest, key_target(tf_key)) if tf_key else None))
    return spans


def _mtime(paths: Iterable[Path]) -> float | None:
    times = [p.stat().st_mtime for p in paths if p.is_file()]
    return max(times) if times else None


def run_spans(run_dir: Path, reports_dir: Path | None = None) -> tuple[list[Span], float, list[str]]:
    """Every span of a finished run estimated from its files, its wall (``created_at`` to the last
    report written, else ``summary.json``) and notes on what is estimated how."""
    run_dir = Path(run_dir)
    manifest = rundir.read_manifest(run_dir)
    created = parse_time(manifest.created_at)
    if created is None:
        raise ValueError(f"{run_dir}: the manifest has no created_at")
    spans = engine_spans(run_dir, manifest=manifest)
    notes = ["estimated from the run's files (cells.jsonl, engine logs, file times): boundaries within ~1 s"]
    runner_end = parse_time(manifest.finished_at)
    summary = rundir.file_mtime(run_dir, rundir.SUMMARY)
    if runner_end is not None and summary is not None:
        scores = rundir.file_mtime(run_dir, rundir.SCORES)
        scored = scores if scores is not None and runner_end <= scores <= summary else runner_end
        if scored > runner_end:
            spans.append(Span(phase="scoring", start=runner_end, end=scored))
        spans.append(Span(phase="analysis", start=scored, end=summary))
    end = summary or runner_end or max((s.end for s in spans), default=created)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", manifest.run_id) or "run"
    if reports_dir is not None and summary is not None:
        written = _mtime([reports_dir / f"{stem}.md", reports_dir / f"{stem}.html"])
        if written is not None and written > summary:
            spans.append(Span(phase="reports", start=summary, end=written))
            end = written
    if manifest.resumed_at:
        notes.append("a resumed run: the wall spans every session, the gaps between them are unaccounted")
    return spans, max(end - created, 0.0), notes


def recorded_engine_spans(phases: list[Any], run_dir: Path, plan: Plan, *, since: float) -> list[Span]:
    """The engine jobs' timed phases as timeline spans: cells split by group (their cells' wall
    times in ``cells.jsonl``), teacher forcing (its engine's start included) shared by the sampled
    groups of its target (what the runner recorded; :func:`engine_spans` estimates it from the files)."""
    records = [r for r in rundir.read_cells(run_dir) if (parse_time(r.finished_at) or 0.0) >= since - 1] \
        if rundir.has_cells(run_dir) else []
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
