"""Anytime-valid confidence sequences and the early-stopping rule (pure: numpy, no I/O).

A cell that may stop early runs its prompts in a seeded random order
(:func:`seeded_order`), so every prefix is a fair sample of the prompt set;
after each block it asks :func:`should_stop` whether the interval of the
metric is tight enough. Because the rule looks at the interval again and
again, a fixed-n interval (the bootstrap of :mod:`specbench.stats`) would
cover less than it claims; the intervals here are *confidence sequences*:
with probability ≥ 1 − α they hold at every n at once, so they stay valid
at whatever n the rule stops.

The prompt is the unit: all samples and repeats of one prompt move together
(as in :func:`specbench.analysis.metrics.paired_speedup`). Per metric, each prompt
contributes a row of ``units`` and the estimate is a smooth function of the
column means, equal on the full set to the value :mod:`specbench.analysis.metrics`
reports:

=========  =====================================================  ==============================
metric     row per prompt                                         estimate
=========  =====================================================  ==============================
tau        (accepted tokens, drafts) summed over its requests     1 + Σ accepted / Σ drafts
tpot       (latency − TTFT, output tokens − 1)                    Σ decode time / Σ (tokens − 1)
speedup    (tok_m, latency_m, tok_b, latency_b), paired by prompt (Σtok_m/Σlat_m)/(Σtok_b/Σlat_b)
accuracy   the prompt's mean score in [0, 1]                      mean
=========  =====================================================  ==============================

Each estimate is its one formula (:func:`specbench.results.counters.tau`,
:func:`specbench.results.speed_estimators.tpot`, :func:`~specbench.results.speed_estimators.throughput_ratio`).

Intervals:

* ``tau``, ``tpot``, ``speedup``: the asymptotic confidence sequence of
  Waudby-Smith, Arnold, Wu, Howard & Ramdas (2021, "Time-uniform central
  limit theory and asymptotic confidence sequences", Thm 2.2) applied to
  the delta-method influence values of log(estimate): estimate ·
  exp(± σ̂ₙ·sqrt(2(nρ²+1)/(n²ρ²)·log(sqrt(nρ²+1)/α))), the Robbins
  normal-mixture boundary, with ρ tuned so the sequence is tightest at a planned n
  (:func:`rho_for`). Valid as n grows (its coverage on real records is
  shown by ``benchmarks/early_stopping.py``).
* ``accuracy``: the hedged-capital betting confidence sequence for a mean
  of values in [0, 1] (Waudby-Smith & Ramdas 2023, "Estimating means of
  bounded random variables by betting", predictable plug-in bets, running
  intersection): valid at every n, no asymptotics, and it does not collapse
  to zero width when the first prompts all score the same.

Prompts drawn in a random order *without* replacement from a finite set are
less variable than an i.i.d. sample, so a sequence valid for i.i.d. draws
covers the full-set value at least as often; once every prompt has run the
estimate *is* the full-set value.

Several rules checked together (τ and speedup of one cell; a method and its
baseline) share the prompt order and stop together (:func:`joint_stop`);
each interval holds at 1 − α on its own (use α / rules for simultaneous
coverage).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from specbench.config.stop_rule import Metric, StopRecord, StopRule
from specbench.results import counters, speed_estimators
from specbench.results.records import RequestRecord

UNIT_COLUMNS: dict[str, int] = {"tau": 2, "tpot": 2, "speedup": 4, "accuracy": 1}
ZERO_SPREAD = 1e-12  # sd of log(estimate) under which a prefix counts as having no spread
BETTING_GRID = 1001  # candidate means of the accuracy sequence (resolution 1e-3)


class Interval(NamedTuple):
    estimate: float
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2


class StopDecision(NamedTuple):
    """``stop``; ``reason``: ``target`` | ``max_prompts`` | ``exhausted`` when it stops,
    else ``min_prompts`` | ``too_wide``; the interval at the prompts seen."""

    stop: bool
    reason: str
    estimate: float
    lo: float
    hi: float
    n: int
    half_width: float
    target_half_width: float


def stop_record(rule: StopRule, decision: StopDecision, *, order_seed: int, n_available: int,
                stopped_with: Sequence[str] = (), checks: Sequence[tuple[int, float, float]] = ()) -> StopRecord:
    """What a cell that stopped under ``rule`` records."""
    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return StopRecord(rule=rule, order_seed=order_seed, n_used=decision.n, n_available=n_available,
               reason=decision.reason, estimate=num(decision.estimate), lo=num(decision.lo),
               hi=num(decision.hi), half_width=num(decision.half_width),
               target_half_width=num(decision.target_half_width),
               interval="betting-cs" if rule.metric == "accuracy" else "asymptotic-cs",
               stopped_with=list(stopped_with), checks=[(n, num(lo), num(hi)) for n, lo, hi in checks])


# ---------------------------------------------------------------------------
# the prompt order


def seeded_order(prompt_ids: Sequence[str], seed: int) -> list[str]:
    """A deterministic random permutation of ``prompt_ids``.

    Each id is ranked by SHA-256 of ``"<seed>:<id>"``: the same on every
    platform, Python and numpy version, independent of the input order, and a
    prompt keeps its relative place when others are added or removed (the
    order of a subset is the subset of the order).
    """
    def key(pid: str) -> tuple[bytes, str]:
        return hashlib.sha256(f"{seed}:{pid}".encode()).digest(), pid

    return sorted(dict.fromkeys(prompt_ids), key=key)


def check_points(rule: StopRule, n_available: int) -> list[int]:
    """The prompt counts at which :func:`should_stop` is asked, the last one
    being ``min(max_prompts, n_available)``."""
    last = min(n_available, rule.max_prompts or n_available)
    pts = list(range(min(rule.min_prompts, last), last, rule.check_every))
    return [*pts, last] if last > 0 else []


# ---------------------------------------------------------------------------
# per-prompt units from records


def prompt_units(
    metric: Metric,
    records: Sequence[RequestRecord],
    baseline: Sequence[RequestRecord] | None = None,
    scores: Mapping[tuple[str, str, int], Mapping[str, object]] | None = None,
    score_metric: str | None = None,
) -> dict[str, np.ndarray]:
    """``{prompt_id: row}`` of one group's records (``baseline``: the paired
    baseline group, for ``speedup``; ``scores`` and ``score_metric``, keyed
    like :func:`specbench.scoring.apply.score_key`, for ``accuracy``).

    The rows follow the definitions of :mod:`specbench.analysis.metrics` and
    :mod:`specbench.analysis.step_time`: a request without what the metric needs (an
    error, no counters, no timings) is left out, as there.
    """
    ok = [r for r in records if r.error is None]
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0] * UNIT_COLUMNS[metric])
    if metric == "tau":
        for r in ok:
            if r.spec is not None:
                row = rows[r.prompt_id]
                row[0] += r.spec.num_accepted_tokens
                row[1] += r.spec.num_drafts
    elif metric == "tpot":
        for r in ok:
            if r.latency_s is None or r.ttft_s is None or r.num_output_tokens < 2:
                continue
            d = r.latency_s - r.ttft_s
            if d > 0:
                row = rows[r.prompt_id]
                row[0] += d
                row[1] += r.num_output_tokens - 1
    elif metric == "speedup":
        if baseline is None:
            raise ValueError("speedup needs the baseline group's records")
        b = {(r.prompt_id, r.sample_index, r.repeat): r for r in baseline if r.error is None}
        for r in ok:
            rb = b.get((r.prompt_id, r.sample_index, r.repeat))
            if rb is None or not r.latency_s or not rb.latency_s:
                continue
            row = rows[r.prompt_id]
            row[0] += r.num_output_tokens
            row[1] += r.latency_s
            row[2] += rb.num_output_tokens
            row[3] += rb.latency_s
    elif metric == "accuracy":
        if scores is None or score_metric is None:
            raise ValueError("accuracy needs scores and score_metric")
        per: dict[str, list[bool]] = defaultdict(list)
        for r in ok:
            v = scores.get((r.cell_id, r.prompt_id, r.sample_index), {}).get(score_metric)
            if isinstance(v, bool):
                per[r.prompt_id].append(v)
        return {p: np.array([float(np.mean(v))]) for p, v in per.items()}
    else:
        raise ValueError(f"unknown metric {metric!r}")
    return {p: np.asarray(v, float) for p, v in rows.items()}


def ordered_units(units: Mapping[str, np.ndarray], order: Sequence[str]) -> np.ndarray:
    """The rows of ``units`` in ``order`` (ids without a row are skipped), as an (n, k) array."""
    rows = [units[p] for p in order if p in units]
    k = len(next(iter(units.values()))) if units else 1
    return np.asarray(rows, float).reshape(len(rows), k)


# ---------------------------------------------------------------------------
# point estimates (the full-set values of specbench.analysis.metrics)


def estimate(metric: Metric, units: np.ndarray) -> float:
    """The metric over the rows of ``units`` (NaN where it is undefined)."""
    u = np.asarray(units, float)
    if u.shape[0] == 0:
        return float("nan")
    return float(estimates(metric, u[None])[0])


def estimates(metric: Metric, blocks: np.ndarray) -> np.ndarray:
    """:func:`estimate` of each of ``b`` resamples at once: ``blocks`` (b, n, k) → (b,)
    (the ``vectorized`` statistic of :func:`specbench.stats.bootstrap`)."""
    u = np.asarray(blocks, float)
    if metric == "accuracy":
        return u.reshape(u.shape[0], u.shape[1], -1)[:, :, 0].mean(axis=1)
    if metric not in UNIT_COLUMNS:
        raise ValueError(f"unknown metric {metric!r}")
    s = u.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "tau":
            out = np.where(s[:, 1] > 0, counters.tau(s[:, 0], s[:, 1]), np.nan)
        elif metric == "tpot":
            out = np.where(s[:, 1] > 0, speed_estimators.tpot(s[:, 0], s[:, 1]), np.nan)
        else:
            ok = (s[:, 1] > 0) & (s[:, 2] > 0) & (s[:, 3] > 0)
            out = np.where(ok, speed_estimators.throughput_ratio(s[:, 0], s[:, 1], s[:, 2], s[:, 3]), np.nan)
    return out


def _gradient(metric: str, m: np.ndarray) -> np.ndarray:
    """∂ estimate / ∂ column means, at means ``m`` of shape (n, k) → (n, k)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric in ("tau", "tpot"):
            return np.stack([1 / m[:, 1], -m[:, 0] / m[:, 1] ** 2], axis=1)
        if metric == "speedup":
            s = speed_estimators.throughput_ratio(m[:, 0], m[:, 1], m[:, 2], m[:, 3])
            return s[:, None] * np.stack([1 / m[:, 0], -1 / m[:, 1], -1 / m[:, 2], 1 / m[:, 3]], axis=1)
    raise ValueError(f"no delta method for {metric!r}")


def _estimates_from_means(metric: str, m: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "tau":
            return counters.tau(m[:, 0], m[:, 1])
        if metric == "tpot":
            return speed_estimators.tpot(m[:, 0], m[:, 1])
        return speed_estimators.throughput_ratio(m[:, 0], m[:, 1], m[:, 2], m[:, 3])


# ---------------------------------------------------------------------------
# the asymptotic confidence sequence (τ, TPOT, speedup)


def rho_for(planned_n: int, alpha: float) -> float:
    """ρ of the normal-mixture boundary that makes it tightest at ``planned_n``
    (Waudby-Smith et al. 2021, eq. after Thm 2.2)."""
    la = -2 * math.log(alpha)
    return math.sqrt((la + math.log(la + 1)) / planned_n)


def normal_mixture_radius(n: np.ndarray | int, rho: float, alpha: float) -> np.ndarray:
    """sqrt(2(nρ²+1)/(n²ρ²)·log(sqrt(nρ²+1)/α)): the half-width per unit σ̂."""
    n = np.asarray(n, float)
    r2 = rho * rho
    return np.sqrt(2 * (n * r2 + 1) / (n * n * r2) * np.log(np.sqrt(n * r2 + 1) / alpha))


def _prefix_moments(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n, column means and sample covariances of every prefix of ``u`` (n, k)."""
    n = np.arange(1, u.shape[0] + 1, dtype=float)
    cs = np.cumsum(u, axis=0)
    cp = np.cumsum(u[:, :, None] * u[:, None, :], axis=0)
    mean = cs / n[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        cov = (cp - n[:, None, None] * mean[:, :, None] * mean[:, None, :]) / (n - 1)[:, None, None]
    return n, mean, cov


def asymptotic_path(
    metric: str, units: np.ndarray, *, alpha: float = 0.05, planned_n: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate, lo and hi of the asymptotic CS after each prefix (arrays of length n).

    The sequence is built for log(estimate) (every ratio metric is positive;
    on the log scale a ratio's sampling distribution is less skewed) and
    exponentiated: estimate · exp(± σ̂ₙ · radius), where σ̂ₙ² = ∇ᵀ Σ̂ₙ ∇ is the
    delta-method variance of the influence values of log f at the prefix's
    own column means (Σ̂ₙ their sample covariance). Entries with fewer than
    two prompts are NaN; a prefix whose rows show no spread at all (the
    first prompts all alike, e.g. τ = K+1 on each) gets (0, ∞): a zero
    variance estimate is not evidence of a narrow interval.
    """
    u = np.asarray(units, float)
    if u.ndim == 1:
        u = u[:, None]
    if u.shape[0] == 0:
        e = np.empty(0)
        return e, e, e
    n, mean, cov = _prefix_moments(u)
    est = _estimates_from_means(metric, mean)
    with np.errstate(divide="ignore", invalid="ignore"):
        g = _gradient(metric, mean) / est[:, None]  # of log(estimate)
    var = np.einsum("ni,nij,nj->n", g, cov, g)
    sd = np.sqrt(np.clip(var, 0, None))
    rho = rho_for(planned_n or u.shape[0], alpha)
    with np.errstate(invalid="ignore", over="ignore"):
        half = sd * normal_mixture_radius(n, rho, alpha)
    half[n < 2] = np.nan
    # no spread seen yet (every prompt so far alike): no width to trust, the interval is (0, ∞)
    half[sd <= ZERO_SPREAD] = np.inf
    return est, est * np.exp(-half), est * np.exp(half)


# ---------------------------------------------------------------------------
# the betting confidence sequence (accuracy)


def betting_path(
    values: np.ndarray, *, alpha: float = 0.05, grid: int = BETTING_GRID
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, lo and hi of the hedged-capital CS for values in [0, 1] after each prefix.

    Capital K±ₜ(m) = Π(1 ± λᵢ(xᵢ − m)) with predictable bets
    λᵢ = min(sqrt(2 log(2/α) / (σ̂²ᵢ₋₁ i log(i+1))), c/m or c/(1−m)), c = ½;
    m is excluded once max(½K⁺, ½K⁻) ≥ 1/α; the set is the running
    intersection, reported as its hull on a grid of ``grid`` means.
    """
    x = np.asarray(values, float).reshape(-1)
    if x.size == 0:
        e = np.empty(0)
        return e, e, e
    if np.any((x < 0) | (x > 1)):
        raise ValueError("the betting sequence needs values in [0, 1]")
    t = np.arange(1, x.size + 1, dtype=float)
    mu_hat = (0.5 + np.cumsum(x)) / (t + 1)
    var_hat = (0.25 + np.cumsum((x - mu_hat) ** 2)) / (t + 1)
    prev_var = np.concatenate([[0.25], var_hat[:-1]])
    lam = np.sqrt(2 * math.log(2 / alpha) / (prev_var * t * np.log(t + 1)))
    m = np.linspace(0, 1, grid)
    c = 0.5
    with np.errstate(divide="ignore"):
        lam_p = np.minimum(lam[:, None], c / m[None, :])
        lam_m = np.minimum(lam[:, None], c / (1 - m[None, :]))
    d = x[:, None] - m[None, :]
    log_kp = np.cumsum(np.log1p(lam_p * d), axis=0)
    log_km = np.cumsum(np.log1p(-lam_m * d), axis=0)
    log_k = np.maximum(log_kp, log_km) + math.log(0.5)
    excluded = np.maximum.accumulate(log_k >= math.log(1 / alpha), axis=0)  # running intersection
    inside = ~excluded
    any_in = inside.any(axis=1)
    lo_i = np.argmax(inside, axis=1)
    hi_i = grid - 1 - np.argmax(inside[:, ::-1], axis=1)
    step = 1.0 / (grid - 1)
    # the hull on the grid, widened by one grid step so the true mean between grid points stays inside
    lo = np.where(any_in, np.clip(m[lo_i] - step, 0, 1), np.nan)
    hi = np.where(any_in, np.clip(m[hi_i] + step, 0, 1), np.nan)
    est = np.cumsum(x) / t
    return est, lo, hi


# ---------------------------------------------------------------------------
# public entry points


def confidence_path(
    metric: Metric, units: np.ndarray, *, alpha: float = 0.05, planned_n: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate, lo, hi of ``metric``'s confidence sequence after every prefix of ``units``
    (rows in the order the prompts ran)."""
    if metric == "accuracy":
        return betting_path(np.asarray(units, float).reshape(-1), alpha=alpha)
    if metric not in UNIT_COLUMNS:
        raise ValueError(f"unknown metric {metric!r}")
    return asymptotic_path(metric, units, alpha=alpha, planned_n=planned_n)


def confidence_sequence(
    metric: Metric, units: np.ndarray, *, alpha: float = 0.05, planned_n: int | None = None
) -> Interval:
    """``(estimate, lo, hi)`` of the confidence sequence after all rows of ``units``.

    ``planned_n`` (default: the rows given) is the n the boundary is tuned for;
    pass the same value at every check of one cell.
    """
    u = np.asarray(units, float)
    if u.shape[0] == 0:
        nan = float("nan")
        return Interval(nan, nan, nan)
    est, lo, hi = confidence_path(metric, u, alpha=alpha, planned_n=planned_n)
    return Interval(float(est[-1]), float(lo[-1]), float(hi[-1]))


def tau_cs(accepted: Sequence[float], drafts: Sequence[float], *, alpha: float = 0.05,
           planned_n: int | None = None) -> Interval:
    """Pooled τ = 1 + Σ accepted / Σ drafts, per-prompt counts in run order."""
    return confidence_sequence("tau", np.column_stack([accepted, drafts]), alpha=alpha, planned_n=planned_n)


def tpot_cs(decode_s: Sequence[float], tokens_after_first: Sequence[float], *, alpha: float = 0.05,
            planned_n: int | None = None) -> Interval:
    """TPOT = Σ (latency − TTFT) / Σ (output tokens − 1)."""
    return confidence_sequence("tpot", np.column_stack([decode_s, tokens_after_first]), alpha=alpha,
                               planned_n=planned_n)


def speedup_cs(tok_m: Sequence[float], lat_m: Sequence[float], tok_b: Sequence[float], lat_b: Sequence[float],
               *, alpha: float = 0.05, planned_n: int | None = None) -> Interval:
    """(Σ tok_m / Σ lat_m) / (Σ tok_b / Σ lat_b), method and baseline paired by prompt."""
    return confidence_sequence("speedup", np.column_stack([tok_m, lat_m, tok_b, lat_b]), alpha=alpha,
                               planned_n=planned_n)


def accuracy_cs(scores: Sequence[float], *, alpha: float = 0.05) -> Interval:
    """Mean of per-prompt scores in [0, 1] (betting CS)."""
    return confidence_sequence("accuracy", np.asarray(scores, float), alpha=alpha)


def should_stop(rule: StopRule, units: np.ndarray, n_available: int | None = None) -> StopDecision:
    """May the cell stop after the prompts whose rows are ``units`` (in run order)?

    ``n_available``: the prompts the cell has in all (for ``exhausted`` and
    ρ's default tuning; keep it the same at every check of a cell).
    """
    u = np.asarray(units, float)
    n = int(u.shape[0])
    if n == 0:
        nan = float("nan")
        done = n_available == 0
        return StopDecision(done, "exhausted" if done else "min_prompts", nan, nan, nan, 0, nan, nan)
    est, lo, hi = confidence_sequence(rule.metric, u, alpha=rule.alpha, planned_n=rule.planned(n_available))
    half = (hi - lo) / 2 if math.isfinite(lo) and math.isfinite(hi) else float("inf")
    target = rule.target_half_width(est)

    def decision(stop: bool, reason: str) -> StopDecision:
        return StopDecision(stop, reason, est, lo, hi, n, half, target)

    if n_available is not None and n >= n_available:
        return decision(True, "exhausted")
    if rule.max_prompts is not None and n >= rule.max_prompts:
        return decision(True, "max_prompts")
    if n < rule.min_prompts:
        return decision(False, "min_prompts")
    if half <= target:
        return decision(True, "target")
    return decision(False, "too_wide")


def joint_stop(decisions: Sequence[StopDecision]) -> tuple[bool, str]:
    """Cells that share a prompt order (a method and its baseline, or several
    metrics of one cell) stop together: when every rule is met, or as soon as
    any of them has run out of prompts or reached its cap."""
    if not decisions:
        return False, "no rules"
    capped = [d.reason for d in decisions if d.reason in ("exhausted", "max_prompts")]
    if capped:
        return True, capped[0]
    if all(d.stop for d in decisions):
        return True, "target"
    return False, next(d.reason for d in decisions if not d.stop)
