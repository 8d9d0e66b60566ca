"""Where a run's wall time goes: spans of work, and their breakdown (issue 16).

A :class:`Span` is one stretch of work of one phase (an engine starting, a
warmup, a measured cell, teacher forcing, scoring, analysis, writing the
reports), with the engine that did it and the summary groups it served.
:class:`specbench.execution.timeline.Timeline` records spans as they happen
(spans of a run that recorded none are estimated from its files by
:mod:`specbench.analysis.timing_estimate`); :func:`breakdown` here turns
spans and the run's wall time into a :class:`TimeBreakdown` that goes into
``manifest.json`` (``time_breakdown``) and the reports.

Clock: spans carry wall-clock seconds (``time.time()``), so spans recorded
in different places (the driver, the engine jobs, ``api.run``) and the ISO
timestamps of ``cells.jsonl`` share one clock.

Definitions (they are what the report says):

* a phase's **wall** is the wall time attributed to it: where spans of
  several phases overlap (one engine starting while another one's cells run)
  each instant goes to one phase, the first of :data:`PRECEDENCE` that is active
  (cells before teacher forcing before warmups before engine starts before
  the rest), so the phases' walls never count an instant twice and add up,
  with the **unaccounted** remainder (no span at all: loading datasets,
  writing files, the gaps between spans), to the run's wall;
* a phase's **busy** time is the union of its own spans (what it would have
  taken alone);
* **engine-seconds** are the sum of the durations of the spans that name an
  engine, overlaps counted once per span: two engines starting at once for
  60 s are 120 engine-seconds (the **overlap** is the wall where two engines
  or more were busy at once); a span without an engine (scoring, analysis,
  reports) has none;
  **GPU-seconds** are engine-seconds × the span's GPUs, where known;
* the **harness share** is the run's wall minus the walls of engine starts
  and measured cells (warmups, teacher forcing, scoring, analysis, reports,
  other and the unaccounted remainder), over the run's wall;
* a group's engine-seconds are its cells' spans plus a share of its engine's
  other spans (start, warmup, ...) in proportion to its cells' time on that
  engine (equal shares when none of them has any).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from specbench.results.manifest import EngineTime, GroupTime, PhaseTime, Span, TimeBreakdown

__all__ = ["PHASES", "PRECEDENCE", "EngineTime", "GroupTime", "PhaseTime", "Span", "TimeBreakdown", "breakdown",
           "fmt_duration", "fmt_share", "harness_parts", "parse_time", "spans_from_phases"]

#: Every phase, in the order a run goes through them (the breakdown's order).
PHASES: tuple[str, ...] = (
    "assets", "engine_start", "warmup", "cells", "teacher_forcing", "scoring", "analysis", "reports", "other",
)
#: The order of precedence where spans overlap (see the module doc).
PRECEDENCE: tuple[str, ...] = (
    "cells", "teacher_forcing", "warmup", "engine_start", "assets", "scoring", "analysis", "reports", "other",
)
#: How the report names each phase.
PHASE_LABELS = {
    "assets": "zoo build (assets)",
    "engine_start": "engine starts",
    "warmup": "warmups",
    "cells": "measured cells",
    "teacher_forcing": "teacher forcing",
    "scoring": "scoring",
    "analysis": "analysis",
    "reports": "reports",
    "other": "other",
    "unaccounted": "unaccounted",
}
#: The phases that are not the harness's own (the rest, and the unaccounted remainder, are).
NOT_HARNESS = ("engine_start", "cells")


def _union(intervals: Iterable[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def _attributed(spans: list[Span]) -> tuple[dict[str, float], float]:
    """Wall per phase (each instant to the active phase of highest precedence), and the wall where two
    engines or more were busy at once."""
    rank = {p: i for i, p in enumerate(PRECEDENCE)}
    edges = sorted({t for s in spans if s.end > s.start for t in (s.start, s.end)})
    out: dict[str, float] = defaultdict(float)
    overlap = 0.0
    for a, b in zip(edges, edges[1:], strict=False):
        active = [s for s in spans if s.start <= a and s.end >= b and s.end > s.start]
        if not active:
            continue
        out[min((s.phase for s in active), key=rank.__getitem__)] += b - a
        if len({s.engine for s in active if s.engine is not None}) > 1:
            overlap += b - a
    return out, overlap


def _gpu(s: Span) -> float | None:
    return s.seconds * s.gpus if s.gpus is not None else None


def _sum_gpu(spans: Iterable[Span]) -> float | None:
    vals = [_gpu(s) for s in spans]
    known = [v for v in vals if v is not None]
    return sum(known) if known else None


def _groups(spans: list[Span]) -> list[GroupTime]:
    """Each group's engine-seconds: its cells, plus its share of its engines' other spans."""
    cells_s: dict[str, float] = defaultdict(float)
    gpu_s: dict[str, float] = defaultdict(float)
    has_gpu: set[str] = set()
    engines_of: dict[str, list[str]] = defaultdict(list)
    engine_groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # engine → group → cell s
    for s in spans:
        if not s.groups:
            continue
        share = s.seconds / len(s.groups)
        for g in s.groups:
            if s.phase == "cells":
                cells_s[g] += share
            if s.engine is not None:
                if s.engine not in engines_of[g]:
                    engines_of[g].append(s.engine)
                engine_groups[s.engine][g] += share if s.phase == "cells" else 0.0
            if s.gpus is not None:
                gpu_s[g] += share * s.gpus
                has_gpu.add(g)
    overhead: dict[str, float] = defaultdict(float)
    for s in spans:
        if s.groups or s.engine is None or s.engine not in engine_groups:
            continue  # a span with groups is theirs already; one of an engine with no group has no one to go to
        weights = engine_groups[s.engine]
        total = sum(weights.values())
        for g, w in weights.items():
            part = s.seconds * (w / total if total > 0 else 1 / len(weights))
            overhead[g] += part
            if s.gpus is not None:
                gpu_s[g] += part * s.gpus
                has_gpu.add(g)
    for s in spans:  # other spans that name their groups (teacher forcing of a group's samples)
        if s.groups and s.phase != "cells":
            for g in s.groups:
                overhead[g] += s.seconds / len(s.groups)
    order = list(dict.fromkeys(g for s in spans for g in s.groups or []))
    return [
        GroupTime(
            group_id=g, engines=engines_of.get(g, []), cells_s=round(cells_s[g], 3), overhead_s=round(overhead[g], 3),
            engine_s=round(cells_s[g] + overhead[g], 3), gpu_s=round(gpu_s[g], 3) if g in has_gpu else None,
        )
        for g in order
    ]


def breakdown(spans: Iterable[Span], total_wall_s: float, *, source: str = "recorded",
              notes: list[str] | None = None) -> TimeBreakdown:
    """The breakdown of ``total_wall_s`` seconds of wall by the spans (see the module doc).

    ``total_wall_s`` is the run's wall from its first to its last instant; spans should lie inside it
    (the attributed walls are scaled down to it if they add up to more, e.g. a wall given too short).
    """
    spans = [s for s in spans if s.end >= s.start]
    wall = max(0.0, float(total_wall_s))
    attributed, overlap = _attributed(spans)
    covered = sum(attributed.values())
    scale = wall / covered if covered > wall > 0 else 1.0
    by_phase: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        by_phase[s.phase].append(s)

    def share(x: float) -> float:
        return round(x / wall, 4) if wall > 0 else 0.0

    phases = []
    for p in PHASES:
        ps = by_phase.get(p, [])
        w = attributed.get(p, 0.0) * scale
        on_engines = [s for s in ps if s.engine is not None]
        gpu = _sum_gpu(on_engines)
        phases.append(PhaseTime(
            phase=p, wall_s=round(w, 3), share=share(w), busy_s=round(_union((s.start, s.end) for s in ps), 3),
            engine_s=round(sum(s.seconds for s in on_engines), 3), gpu_s=round(gpu, 3) if gpu is not None else None,
            spans=len(ps),
        ))
    unaccounted = max(0.0, wall - covered * scale)
    phases.append(PhaseTime(phase="unaccounted", wall_s=round(unaccounted, 3), share=share(unaccounted)))
    harness = wall - sum(attributed.get(p, 0.0) * scale for p in NOT_HARNESS)
    engines: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s.engine is not None:
            engines[s.engine].append(s)
    engine_rows = []
    for key, ss in engines.items():
        per: dict[str, float] = defaultdict(float)
        for s in ss:
            per[s.phase] += s.seconds
        gpu = _sum_gpu(ss)
        engine_rows.append(EngineTime(
            engine=key, engine_s=round(sum(s.seconds for s in ss), 3), gpu_s=round(gpu, 3) if gpu is not None else None,
            by_phase={p: round(per[p], 3) for p in PHASES if p in per},
        ))
    return TimeBreakdown(
        wall_s=round(wall, 3), phases=phases, unaccounted_s=round(unaccounted, 3), harness_s=round(max(0.0, harness), 3),
        harness_share=share(max(0.0, harness)), overlap_s=round(overlap * scale, 3), engines=engine_rows,
        groups=_groups(spans), source=source, notes=list(notes or []),
    )


def spans_from_phases(
    phases: Iterable[Any],
    cell_records: Iterable[Any],
    group_of: Mapping[str, str],
    groups_of_engine: Mapping[str, list[str]] | None = None,
    teacher_forcing_jobs: Iterable[str] = (),
) -> list[Span]:
    """Spans from the engine jobs' timed phases (:class:`specbench.execution.jobs.PhaseTimed`: ``job_id`` — the
    engine key —, ``phase``, ``start``, ``end``, ``gpus``; 0 GPUs is none).

    A job's ``cells`` phase is split among its cells (``CellRecord``: ``engine_key``, ``cell_id``,
    ``status``, ``wall_time_s``, ``finished_at``) in proportion to their wall times, one after another,
    so the phase's wall and engine-seconds stay whole and each group gets its cells' share;
    ``group_of`` maps a cell id to its group. A ``teacher_forcing`` phase goes to the groups
    ``groups_of_engine`` names for its engine (the sampled groups it scores), in equal shares. A phase
    that is none of :data:`PHASES` (an engine's close, say) is ``other``, with its engine. The engine
    start of a job in ``teacher_forcing_jobs`` counts as teacher forcing: starting an engine of its own
    is the harness's choice (one already up could serve it).
    """
    tf_jobs = set(teacher_forcing_jobs)
    recs = [r for r in cell_records if r.status == "ok" and r.wall_time_s and parse_time(r.finished_at) is not None]
    used: set[int] = set()
    out: list[Span] = []
    for ph in sorted(phases, key=lambda p: p.start):
        gpus = int(ph.gpus) if getattr(ph, "gpus", None) else None
        if ph.phase != "cells":
            groups = (groups_of_engine or {}).get(ph.job_id) if ph.phase == "teacher_forcing" else None
            phase = ph.phase if ph.phase in PHASES else "other"  # e.g. an engine's close
            if ph.job_id in tf_jobs:
                phase = "teacher_forcing"
                groups = (groups_of_engine or {}).get(ph.job_id)
            out.append(Span(phase=phase, start=ph.start, end=ph.end, engine=ph.job_id, gpus=gpus,
                            groups=list(groups) if groups else None))
            continue
        mine = [(i, r) for i, r in enumerate(recs) if i not in used and r.engine_key == ph.job_id
                and ph.start - 1 <= (parse_time(r.finished_at) or 0.0) <= ph.end + 1]
        total = sum(r.wall_time_s for _, r in mine)
        if not mine or total <= 0:
            out.append(Span(phase="cells", start=ph.start, end=ph.end, engine=ph.job_id, gpus=gpus))
            continue
        t = ph.start
        for i, r in sorted(mine, key=lambda x: parse_time(x[1].finished_at) or 0.0):
            used.add(i)
            d = (ph.end - ph.start) * r.wall_time_s / total
            gid = group_of.get(r.cell_id)
            out.append(Span(phase="cells", start=t, end=t + d, engine=ph.job_id, gpus=gpus,
                            groups=[gid] if gid else None))
            t += d
    return out


def parse_time(iso: str | None) -> float | None:
    """Wall-clock seconds of an ISO timestamp (``cells.jsonl``, ``manifest.json``); None when absent or bad."""
    if not iso:
        return None
    try:
        t = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


# --------------------------------------------------------------------------
# presentation (pure strings; the reports and the CLI's closing line)


def fmt_duration(s: float) -> str:
    """'2m10s', '48s', '1h02m', '0.4s'."""
    if s < 10:
        return f"{s:.1f}s"
    n = int(round(s))
    if n < 60:
        return f"{n}s"
    if n < 3600:
        return f"{n // 60}m{n % 60:02d}s"
    return f"{n // 3600}h{n % 3600 // 60:02d}m"


def fmt_share(x: float) -> str:
    """'37 %' (a share of the wall, 0..1)."""
    return f"{100 * x:.0f} %"


def harness_parts(bd: TimeBreakdown) -> list[tuple[str, float]]:
    """The harness's own walls by phase (the unaccounted remainder included), largest first, the empty ones left out."""
    parts = [(PHASE_LABELS[p.phase], p.wall_s) for p in bd.phases if p.phase not in NOT_HARNESS and p.wall_s >= 0.05]
    return sorted(parts, key=lambda x: -x[1])
