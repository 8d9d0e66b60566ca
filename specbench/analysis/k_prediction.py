"""The K sweep predicted from one run at the largest K (pure; issue 37).

Acceptance is prefix-based: a draft at position i is accepted only if positions 0..i−1 were, so
``accepted_per_pos[i] / num_drafts`` is the chance that a step accepts more than i drafts. A run
at K_max therefore gives, for every K ≤ K_max,

* τ(K) = 1 + Σ_{i<K} accepted_i / drafts (:func:`specbench.results.counters.tau`), and
* tokens per step(K) = the measured tokens per step at K_max × τ(K) / τ(K_max): committed tokens
  over decoding steps (:mod:`specbench.analysis.step_accounting`), rescaled by the τ ratio. Exact at K_max;
  at smaller K it keeps K_max's share of tokens lost past the end (vLLM issue 56101), a slight
  underestimate, and a method that skips drafting (ngram) keeps its share of undrafted steps.

Both hold when the proposal at position i does not depend on K: true of an autoregressive
drafter (EAGLE-3, a draft model: position i is drafted from positions < i, whatever K is), not
necessarily of a parallel one (P-EAGLE, DFlash, DSpark draft the whole block in one pass, and a
block of K may differ from the first K of a block of K_max). Where the run measured other Ks
the error is stated beside the prediction; the check is |predicted − measured| τ ≤
max(0.05, the measured interval's half-width).

Intervals: a bootstrap over the source group's requests (:func:`specbench.stats.bootstrap`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from specbench import stats
from specbench.analysis.step_time import decoding_steps
from specbench.results import counters
from specbench.results.records import RequestRecord
from specbench.results.schedule_file import KPrediction, KPredictionPoint
from specbench.results.summary import GroupSummary
from specbench.stats import Estimate

#: How each method kind drafts: whether a proposal at position i can depend on K.
DRAFTER: dict[str, str] = {
    "eagle3": "autoregressive", "draft_model": "autoregressive", "mtp": "autoregressive",
    "p-eagle": "parallel", "dflash": "parallel", "dspark": "parallel",
    "ngram": "lookup", "suffix": "lookup",
}

#: The floor of the prediction check on τ (the issue's 0.05).
TAU_TOLERANCE = 0.05


def drafter(method_kind: str) -> str:
    return DRAFTER.get(method_kind, "unknown")


def acceptance_row(r: RequestRecord, k_max: int) -> list[float] | None:
    """``[drafts, accepted_0..accepted_{k_max-1}, committed, steps]`` of a request with drafts
    (committed and steps NaN when its decoding steps are not known exactly)."""
    if r.error is not None or r.spec is None or r.spec.num_drafts <= 0:
        return None
    acc = (r.spec.accepted_per_pos + [0] * k_max)[:k_max]
    steps = decoding_steps(r, speculative=True) if r.steps is not None else None
    committed = r.num_output_tokens - 1
    tail = [float(committed), float(steps)] if steps and committed > 0 else [np.nan, np.nan]
    return [float(r.spec.num_drafts), *map(float, acc), *tail]


def acceptance_rows(requests: Sequence[RequestRecord], k_max: int) -> np.ndarray:
    """:func:`acceptance_row` of each request that has one, as an array (n, k_max + 3)."""
    rows = [row for r in requests if (row := acceptance_row(r, k_max)) is not None]
    return np.array(rows, float).reshape(-1, k_max + 3)


def _sums(blk: np.ndarray) -> np.ndarray:
    """Column sums over the unit axis of a (n, c) array or a (b, n, c) block, as (b, c)."""
    return blk.sum(axis=-2).reshape(-1, blk.shape[-1])


def tau_of(blk: np.ndarray, k: int) -> np.ndarray:
    s = _sums(blk)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = counters.tau(s[:, 1:1 + k].sum(axis=1), s[:, 0])
    return np.where(s[:, 0] > 0, out, np.nan)


def tokens_per_step_of(blk: np.ndarray, k: int, k_max: int) -> np.ndarray:
    s = _sums(blk)
    with np.errstate(divide="ignore", invalid="ignore"):
        measured = s[:, -2] / s[:, -1]
        return measured * tau_of(blk, k) / tau_of(blk, k_max)


def predict_tau(rows: np.ndarray, k: int) -> Estimate:
    """τ(k) from the rows of :func:`acceptance_rows`, bootstrap over requests."""
    return stats.bootstrap(rows, lambda a: float(tau_of(a, k)[0]), batched=lambda b: tau_of(b, k))


def predict_tokens_per_step(rows: np.ndarray, k: int, k_max: int) -> Estimate | None:
    """Tokens per step(k) (None unless every request's decoding steps are known)."""
    if rows.size == 0 or np.isnan(rows[:, -1]).any():
        return None
    return stats.bootstrap(rows, lambda a: float(tokens_per_step_of(a, k, k_max)[0]),
                           batched=lambda b: tokens_per_step_of(b, k, k_max))


def _workload(g: GroupSummary) -> tuple:
    return (*g.baseline_key, g.family or g.method)


def analysable(g: GroupSummary) -> bool:
    """A group the K analysis reads: a whole group (no slice) that measured requests, lossless (a lossy
    group's acceptance is set, not a drafter's)."""
    return g.status in ("ok", "partial") and g.n_requests > 0 and g.slice is None and g.lossy is None


def _usable(g: GroupSummary) -> bool:
    return (analysable(g) and g.method_kind != "baseline" and g.k is not None and g.k > 0
            and g.schedule is None)  # a schedule mixes Ks


def predict_workload(source: GroupSummary, requests: Sequence[RequestRecord],
                     measured: Sequence[GroupSummary] = ()) -> KPrediction | None:
    """τ(K) and tokens per step(K) for K = 1..source.k, from ``source``'s requests; ``measured``:
    the workload's groups at other Ks (their τ and tokens per step go beside the prediction)."""
    k_max = source.k or 0
    rows = acceptance_rows(requests, k_max)
    if k_max < 1 or rows.shape[0] == 0:
        return None
    at = {g.k: g for g in measured}
    points = []
    for k in range(1, k_max + 1):
        tau = predict_tau(rows, k)
        m = at.get(k) if k != k_max else source
        m_tau = m.tau if m is not None else None
        err = (tau.value - m_tau.value) if m_tau is not None and tau.value is not None and m_tau.value is not None \
            else None
        hw = m_tau.half_width if m_tau is not None else None
        points.append(KPredictionPoint(
            k=k, tau=tau, tokens_per_step=predict_tokens_per_step(rows, k, k_max),
            measured_group=m.group_id if m is not None else None, measured_tau=m_tau,
            measured_tokens_per_step=m.tokens_per_step if m is not None else None,
            tau_error=err, tolerance=max(TAU_TOLERANCE, hw or 0.0) if err is not None else None))
    return KPrediction(
        target=source.target, method=source.family or source.method, method_kind=source.method_kind,
        drafter=drafter(source.method_kind), dataset=source.dataset, temperature=source.temperature,
        batch_size=source.batch_size, request_rate=source.request_rate, source_group=source.group_id,
        source_k=k_max, points=points)


def predictions(groups: Sequence[GroupSummary],
                group_requests: Mapping[str, Sequence[RequestRecord]]) -> list[KPrediction]:
    """One :class:`KPrediction` per workload (target, dataset, temperature, load, method), from its
    largest-K group."""
    buckets: dict[tuple, list[GroupSummary]] = defaultdict(list)
    for g in groups:
        if _usable(g):
            buckets[_workload(g)].append(g)
    out = []
    for gs in buckets.values():
        source = max(gs, key=lambda g: g.k or 0)
        p = predict_workload(source, group_requests.get(source.group_id, []),
                             [g for g in gs if g is not source])
        if p is not None:
            out.append(p)
    return out


def errors_by_drafter(preds: Sequence[KPrediction]) -> dict[str, dict[str, float]]:
    """Per drafter kind: ``n`` comparisons (a K below the source's, measured), ``mean_abs`` and
    ``max_abs`` τ error, and ``within`` (how many met the tolerance)."""
    out: dict[str, dict[str, float]] = {}
    for p in preds:
        for pt in p.points:
            if pt.k == p.source_k or pt.tau_error is None or pt.tolerance is None:
                continue
            d = out.setdefault(p.drafter, {"n": 0, "sum_abs": 0.0, "max_abs": 0.0, "within": 0})
            d["n"] += 1
            d["sum_abs"] += abs(pt.tau_error)
            d["max_abs"] = max(d["max_abs"], abs(pt.tau_error))
            d["within"] += int(abs(pt.tau_error) <= pt.tolerance)
    return {k: {"n": v["n"], "mean_abs": v["sum_abs"] / v["n"], "max_abs": v["max_abs"], "within": v["within"]}
            for k, v in out.items()}
