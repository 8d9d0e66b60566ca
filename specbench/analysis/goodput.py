"""Goodput under SLOs: a group's requests meeting every objective per second (pure; issue 52).

The definition is vLLM's ``request_goodput`` (``vllm bench serve --goodput ttft:…,tpot:…,e2el:…``, milliseconds;
``calculate_metrics`` in vLLM's ``benchmarks/serve.py``): a request is *good* when it succeeded and each given
objective holds, TTFT ≤ ttft, its own TPOT = (latency − TTFT) / (output tokens − 1) ≤ tpot (a request of one
token has TPOT 0 there and meets any limit) and latency ≤ e2el
(:func:`specbench.analysis.serving_metrics.meets_slo`); goodput = good requests / the benchmark's duration.

**The denominator** here is the wall time of the group's cells, summed over repeats (each cell's
``wall_time_s``): a server cell's load from its first send to its last response (vLLM's benchmark duration), an
offline cell's generation, and in a run with speed rounds the sum of the cell's batches' walls in every round.
A resumed cell's wall covers only the requests of its last attempt, so a group with one gets no goodput.

The interval is the Wilson interval of the share of requests meeting the SLOs times requests sent / wall time:
the wall is held fixed (a cell's wall moves with its requests' latencies; the share's binomial spread is what
is counted). ``n``: requests sent, failed ones included (they never meet an SLO).

What each engine measures is the suite's check (:data:`specbench.config.suite_checks.SLO_MEASURED_BY`); a group
whose successful requests lack a timing an objective needs gets no goodput rather than a count of misses.
The ratio to no speculation by load and where it stops rising: :mod:`specbench.analysis.goodput_vs_load`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from specbench import stats
from specbench.analysis.serving_metrics import SLO, meets_slo
from specbench.config.suite import SLOSpec
from specbench.results import speed_estimators
from specbench.results.records import CellRecord, RequestRecord
from specbench.stats import Estimate

MS = 1000.0  # vLLM's objectives are in milliseconds, records in seconds


class GroupGoodput(NamedTuple):
    """A group's goodput (requests/s) and the share of its requests meeting every SLO, each with n = requests."""

    rate: Estimate
    share: Estimate


def slo_seconds(spec: SLOSpec) -> SLO:
    """A suite's ``slo:`` (milliseconds, vLLM's names) as the objectives the records are held to (seconds)."""
    def s(ms: float | None) -> float | None:
        return None if ms is None else ms / MS

    return SLO(ttft_s=s(spec.ttft), tpot_s=s(spec.tpot), latency_s=s(spec.e2el))


def timed_for(rec: RequestRecord, slo: SLO) -> bool:
    """Whether a request carries every timing ``slo`` needs (a failed one needs none: it never meets it)."""
    if rec.error is not None:
        return True
    needs_ttft = slo.ttft_s is not None or slo.tpot_s is not None
    needs_latency = slo.latency_s is not None or slo.tpot_s is not None
    return not ((needs_ttft and rec.ttft_s is None) or (needs_latency and rec.latency_s is None))


def cells_wall(cells: Sequence[CellRecord]) -> float | None:
    """Σ wall time of a group's ok cells; None when one has none or covers only part of its requests (resumed)."""
    if not cells or any(not c.wall_time_s or (c.reason or "").startswith("resumed") for c in cells):
        return None
    return float(sum(c.wall_time_s or 0.0 for c in cells))


def group_goodput(records: Sequence[RequestRecord], cells: Sequence[CellRecord], slo: SLO) -> GroupGoodput | None:
    """The group's goodput and share meeting ``slo`` over its requests and its ok cells (see the module); None
    without requests, without a wall time, or when a successful request lacks a timing ``slo`` needs."""
    wall = cells_wall(cells)
    if not records or wall is None or not all(timed_for(r, slo) for r in records):
        return None
    n = len(records)
    good = sum(meets_slo(r, slo) for r in records)
    share = stats.wilson(good, n)
    lo, hi = share.ci_low or 0.0, share.ci_high if share.ci_high is not None else 1.0
    rate = Estimate(value=float(speed_estimators.goodput(good, wall)),
                    ci_low=float(speed_estimators.goodput(lo * n, wall)),
                    ci_high=float(speed_estimators.goodput(hi * n, wall)), n=n, method="wilson × rate")
    return GroupGoodput(rate, share)
