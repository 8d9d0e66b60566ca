"""Interval estimates (pure: numpy/scipy, seeded, no clocks or I/O).

Every number specbench reports is an :class:`Estimate`: a value, a 95%
interval and the n it rests on. Bootstrap intervals are percentile intervals
over resampled *units* (requests or prompts), seeded so that the same
records always give the same interval.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats as sps

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20260101
CONFIDENCE = 0.95


class Estimate(BaseModel):
    """A value with its 95% interval and sample size.

    ``method`` names how the interval was computed (``bootstrap``,
    ``wilson``, ``t``, ``exact``, ``round bootstrap`` or ``none`` when it could not be).
    """

    model_config = ConfigDict(extra="forbid")

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    method: str = "none"
    rounds: int | None = None  # speed measured in interleaved rounds: how many the interval rests on

    def fmt(self, digits: int = 2, pct: bool = False) -> str:
        if self.value is None:
            return "–"
        scale = 100.0 if pct else 1.0
        suffix = "%" if pct else ""
        v = f"{self.value * scale:.{digits}f}{suffix}"
        if self.ci_low is None or self.ci_high is None:
            return v
        return f"{v} [{self.ci_low * scale:.{digits}f}, {self.ci_high * scale:.{digits}f}]"

    def contains(self, x: float) -> bool:
        return self.ci_low is not None and self.ci_high is not None and self.ci_low <= x <= self.ci_high

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (None without an interval)."""
        return None if self.ci_low is None or self.ci_high is None else (self.ci_high - self.ci_low) / 2


def empty(n: int = 0) -> Estimate:
    return Estimate(value=None, n=n)


#: Resample indices are drawn in blocks of at most this many entries (memory
#: stays bounded at large n); blocks draw the very numbers one draw would.
_BLOCK_ENTRIES = 2_000_000


def bootstrap(
    units: Sequence[object] | np.ndarray,
    statistic: Callable[[np.ndarray], float] | Callable[[np.ndarray], np.ndarray],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
    vectorized: bool = False,
    batched: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Estimate:
    """Percentile bootstrap of ``statistic`` over resampled units (the one one-sample bootstrap).

    ``units`` is an array whose first axis indexes the resampled unit
    (e.g. rows of ``[accepted, drafts]`` per request); ``statistic``
    receives a resampled array of the same shape and returns a float. With
    ``vectorized`` it receives a block of resamples at once, shape
    ``(b, *units.shape)``, and returns ``b`` values (reduce over axis 1).
    ``batched``: the same statistic in that block form, used for the resamples only (the point
    value stays ``statistic``'s); it must give the very numbers ``statistic`` gives per resample
    (``tests/unit/test_stats_batched.py``), only without a Python call per resample.
    NaN resamples (e.g. a ratio with a zero denominator) are dropped.
    """
    arr = np.asarray(units, dtype=float)
    n = int(arr.shape[0]) if arr.ndim else 0
    if n == 0:
        return empty()
    value = float(statistic(arr[None])[0]) if vectorized else float(statistic(arr))  # type: ignore[index]
    if n == 1:
        return Estimate(value=value, n=1, method="none")
    rng = np.random.default_rng(seed)
    reps = np.empty(resamples, dtype=float)
    block = max(1, _BLOCK_ENTRIES // n)
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        if vectorized:
            reps[start:stop] = statistic(arr[idx])
        elif batched is not None:
            reps[start:stop] = batched(arr[idx])
        else:
            reps[start:stop] = [statistic(arr[i]) for i in idx]
    return _percentile_estimate(value, reps, n, confidence)


def bootstrap_two_sample(
    a: Sequence[object] | np.ndarray,
    b: Sequence[object] | np.ndarray,
    statistic: Callable[[np.ndarray, np.ndarray], float | np.ndarray],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """Percentile bootstrap of ``statistic(a, b)`` for two independent samples, each resampled on its own
    (e.g. a method's requests against the baseline's, which share no unit to pair on).

    ``statistic`` is vectorised and reduces over the unit axis, which is the
    first axis of the samples as given (for the point value) and the second
    of the resampled blocks, shape ``(resamples, n, …)``. ``n`` is the
    smaller sample; either below 2 units gives no interval.
    """
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    na, nb = int(a_arr.shape[0]), int(b_arr.shape[0])
    n = min(na, nb)
    if n == 0:
        return Estimate(value=None, n=n)
    value = float(statistic(a_arr, b_arr))
    if na < 2 or nb < 2:
        return Estimate(value=value, n=n, method="none")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, na, size=(resamples, na))
    ib = rng.integers(0, nb, size=(resamples, nb))
    reps = np.asarray(statistic(a_arr[ia], b_arr[ib]), dtype=float)
    return _percentile_estimate(value, reps, n, confidence)


def round_bootstrap(
    rounds: Sequence[Sequence[object] | np.ndarray],
    statistic: Callable[[np.ndarray], float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
    batched: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Estimate:
    """Hierarchical percentile bootstrap over measurement rounds, then units within them (the one
    drift-aware speed interval; issue 22).

    ``rounds`` holds one array per round whose first axis indexes its units (e.g. rows of
    ``[tokens, latency, base tokens, base latency]`` per prompt, the method's and the baseline's
    requests measured next to each other). Each resample draws as many rounds as there are, with
    replacement, then each drawn round's units with replacement, and applies ``statistic`` to the
    rows pooled. A machine that drifts between rounds moves whole rounds, so the interval widens
    with the drift and not only with the spread over prompts. One round is the plain
    :func:`bootstrap` over its units. ``n`` is the number of units, ``rounds`` the rounds used.
    ``batched`` (see :func:`bootstrap`) computes the resamples of one pooled size at once.
    """
    blocks = [np.asarray(r, dtype=float) for r in rounds]
    blocks = [b for b in blocks if b.ndim and b.shape[0] > 0]
    if not blocks:
        return empty()
    if len(blocks) == 1:
        return bootstrap(blocks[0], statistic, resamples=resamples, seed=seed, confidence=confidence,
                         batched=batched).model_copy(update={"rounds": 1})
    pooled = np.concatenate(blocks)
    n = int(pooled.shape[0])
    value = float(statistic(pooled))
    rng = np.random.default_rng(seed)
    sizes = [b.shape[0] for b in blocks]
    starts = np.cumsum([0, *sizes[:-1]])
    r = len(blocks)
    # Each resample's rows of ``pooled``: its rounds drawn, then each drawn round's units (in this order).
    rows = []
    for _ in range(resamples):
        picked = rng.integers(0, r, size=r)
        rows.append(np.concatenate([starts[j] + rng.integers(0, sizes[j], size=sizes[j]) for j in picked]))
    reps = np.empty(resamples, dtype=float)
    if batched is None:
        for i, idx in enumerate(rows):
            reps[i] = statistic(pooled[idx])
    else:
        by_size: dict[int, list[int]] = {}
        for i, idx in enumerate(rows):
            by_size.setdefault(len(idx), []).append(i)
        for which in by_size.values():
            reps[which] = batched(pooled[np.stack([rows[i] for i in which])])
    est = _percentile_estimate(value, reps, n, confidence)
    return est.model_copy(update={"method": "round bootstrap" if est.method == "bootstrap" else est.method,
                                  "rounds": r})


def with_between_run(e: Estimate, pct: float) -> Estimate:
    """``e`` with a between-run component of ``pct`` % of its value added to each side of its interval in
    quadrature (the two are independent: the spread over prompts within a run, and what moves a whole
    run; issue 22). ``pct`` comes from an A/A calibration (:mod:`specbench.results.noise_calibration`). An estimate
    without an interval gets one of the between-run width alone; ``method`` says it was widened."""
    if not pct or e.value is None:
        return e
    h = abs(e.value) * pct / 100
    lo = e.value - (math.hypot(e.value - e.ci_low, h) if e.ci_low is not None else h)
    hi = e.value + (math.hypot(e.ci_high - e.value, h) if e.ci_high is not None else h)
    return e.model_copy(update={"ci_low": lo, "ci_high": hi, "method": f"{e.method} + between-run (A/A)"})


def _percentile_estimate(value: float, reps: np.ndarray, n: int, confidence: float) -> Estimate:
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return Estimate(value=value, n=n, method="none")
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(reps, [alpha, 1 - alpha])
    return Estimate(value=value, ci_low=float(lo), ci_high=float(hi), n=n, method="bootstrap")


def mean_ci(values: Sequence[float] | np.ndarray) -> Estimate:
    """Mean with a bootstrap interval."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return bootstrap(np.asarray(vals), lambda a: float(np.mean(a)), batched=lambda blk: blk.mean(axis=1))


def ratio_ci(num: Sequence[float] | np.ndarray, den: Sequence[float] | np.ndarray,
             rounds: Sequence[int | None] | None = None, *,
             estimator: Callable[[Any, Any], Any] | None = None) -> Estimate:
    """sum(num)/sum(den) — or ``estimator(sum(num), sum(den))``, a formula written elsewhere once (a speed
    estimator) — with a bootstrap over the paired units; with ``rounds`` (each unit's speed round) spanning
    more than one round, the :func:`round_bootstrap` over rounds and units."""
    pairs = np.column_stack([np.asarray(num, float), np.asarray(den, float)]) if len(num) else np.empty((0, 2))
    if estimator is None:
        return by_rounds(pairs, _ratio, rounds, batched=_ratios)
    of = estimator

    def pooled(a: np.ndarray) -> float:
        return _ratio(a, of)

    def pooled_blocks(blk: np.ndarray) -> np.ndarray:
        return _ratios(blk, of)

    return by_rounds(pairs, pooled, rounds, batched=pooled_blocks)


def by_rounds(units: np.ndarray, statistic: Callable[[np.ndarray], float],
              rounds: Sequence[int | None] | None,
              batched: Callable[[np.ndarray], np.ndarray] | None = None) -> Estimate:
    """:func:`bootstrap` of ``units`` (``batched``: see there), or :func:`round_bootstrap` when
    ``rounds`` (one label per unit) holds more than one round: the speed interval of a run measured
    in rounds."""
    labels = list(rounds) if rounds is not None else []
    distinct = sorted({r for r in labels if r is not None})
    if len(distinct) < 2 or len(labels) != len(units):
        return bootstrap(units, statistic, batched=batched)
    return round_bootstrap([units[[i for i, r in enumerate(labels) if r == d]] for d in distinct], statistic,
                           batched=batched)


def proportion_ci(hits: Sequence[float] | np.ndarray, totals: Sequence[float] | np.ndarray) -> Estimate:
    """A pooled proportion Σ hits / Σ totals over units (requests): :func:`ratio_ci`, except when every
    unit's share is 0, or every one is 1. A bootstrap then has zero width, a certainty a few units
    cannot give; the Wilson interval over the pooled totals takes its place (its ``n`` is then
    ``Σ totals``: tokens or steps, not units)."""
    h, t = np.asarray(hits, float), np.asarray(totals, float)
    keep = t > 0
    h, t = h[keep], t[keep]
    if t.size and (not h.any() or bool(np.all(h == t))):
        return wilson(int(h.sum()), int(t.sum()))
    return ratio_ci(h, t)


def _ratio(a: np.ndarray, of: Callable[[Any, Any], Any] = operator.truediv) -> float:
    """``of(Σ a[:, 0], Σ a[:, 1])`` (their quotient by default); NaN without a positive denominator."""
    d = a[:, 1].sum()
    return float(of(a[:, 0].sum(), d)) if d > 0 else float("nan")


def _ratios(blk: np.ndarray, of: Callable[[Any, Any], Any] = operator.truediv) -> np.ndarray:
    """:func:`_ratio` of each resample in a block ``(b, n, 2)``."""
    d = blk[:, :, 1].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, of(blk[:, :, 0].sum(axis=1), d), np.nan)


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n`` (the one Wilson formula).

    Unlike the normal (Wald) interval it stays inside [0, 1] and keeps close
    to nominal coverage at small ``n`` and at ``successes`` in {0, n}, which
    is where identity rates live (a method matches 100/100 prompts: the
    interval is [0.963, 1], not [1, 1]). The endpoints at 0 and n are exactly
    0 and 1 (the formula would leave rounding noise). ``n == 0`` returns the
    uninformative (0, 1).
    """
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return (0.0, 1.0)
    z = float(sps.norm.ppf(1 - (1 - confidence) / 2))
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return (lo, hi)


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """A proportion with its :func:`wilson_interval` (no value when ``n == 0``)."""
    if n == 0:
        return empty()
    lo, hi = wilson_interval(successes, n, confidence)
    return Estimate(value=successes / n, ci_low=lo, ci_high=hi, n=n, method="wilson")


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """Mean with a Student-t interval (for a handful of repeats)."""
    vals = np.asarray([v for v in values if v is not None], dtype=float)
    n = int(vals.size)
    if n == 0:
        return empty()
    m = float(vals.mean())
    if n == 1:
        return Estimate(value=m, n=1)
    se = float(vals.std(ddof=1) / math.sqrt(n))
    h = float(sps.t.ppf(1 - (1 - confidence) / 2, n - 1)) * se
    return Estimate(value=m, ci_low=m - h, ci_high=m + h, n=n, method="t")


def percentile(values: Sequence[float], q: float) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.percentile(vals, q)) if vals else None


def significant_change(base: Estimate, new: Estimate) -> bool:
    """True when the two 95% intervals do not overlap (a conservative test)."""
    if None in (base.ci_low, base.ci_high, new.ci_low, new.ci_high):
        return False
    assert base.ci_low is not None and base.ci_high is not None
    assert new.ci_low is not None and new.ci_high is not None
    return new.ci_low > base.ci_high or new.ci_high < base.ci_low


# --------------------------------------------------------------------------
# power of the PIT uniformity test (the sampled lossless check; the suite checks its token budget)


def _ks_critical(n: int, level: float) -> float:
    return float(sps.kstwo.isf(level, n))


@functools.lru_cache(maxsize=4096)
def min_detectable_tv(n: int, alpha: float = 0.01, power: float = 0.95, n_tests: int = 2) -> float:
    """Smallest per-token TV error the PIT test detects with ``power`` at ``n``.

    Derivation. Let ``P_i`` be the scorer's (coarsened: top-k + tail)
    distribution at position ``i`` and ``Q_i`` the law the method actually
    sampled from, coarsened the same way, and ``G_i(t) = P(u_i <= t)``. For
    any t, ``{u_i <= t}`` is one event of (token, V), so
    ``|G_i(t) - t| <= TV(P_i, Q_i) <= TV`` of the uncoarsened laws. The
    bound is attained when the error moves mass from categories early in
    the canonical order to later ones (e.g. from likely to unlikely tokens,
    as a too-high temperature does), with ``t`` at the boundary.

    Assume that aligned case with the same direction and size ``delta`` at
    every position (the pooled CDF then deviates by ``delta`` at some
    ``t*``). The KS statistic ``D_n >= |G_n(t*) - t*|`` and, by
    Azuma–Hoeffding on the martingale differences ``1{u_i <= t*} - G_i(t*)``
    (valid for dependent positions), ``G_n(t*)`` stays within
    ``eps = sqrt(ln(1/beta) / (2n))`` of its mean with probability
    ``>= 1 - beta``. The test rejects when ``D_n`` exceeds the exact KS
    critical value ``c`` at level ``alpha / n_tests`` (the Bonferroni share
    the KS gets in :func:`specbench.analysis.lossless_sampled.uniformity_test`). So ``delta >= c + eps`` is
    detected with probability ``>= power = 1 - beta``:

        min_detectable_tv(n) = c_{alpha/n_tests}(n) + sqrt(ln(1/(1-power)) / (2n))

    which behaves like ``(1.73 + 1.22) / sqrt(n)`` at the defaults
    (0.093 at n=1000, 0.047 at n=4000).

    Assumptions and reading: this is the detectable *aligned* error. An
    error that moves mass inconsistently (in opposite directions at
    different positions, or within the tail bucket) shifts the PIT CDF by
    less than its TV — possibly by nothing — and may go undetected at any
    ``n``. Conversely the bound is sufficient, not necessary (Hoeffding is
    loose), so the simulated power is usually better. Returns ``inf`` for
    ``n < 1``; values above 1 mean nothing is detectable.
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError("alpha and power must be in (0, 1)")
    if n < 1:
        return math.inf
    c = _ks_critical(int(n), alpha / max(1, n_tests))
    return c + math.sqrt(math.log(1.0 / (1.0 - power)) / (2.0 * n))


@functools.lru_cache(maxsize=256)
def min_tokens_for_tv(tv: float, alpha: float = 0.01, power: float = 0.95, n_tests: int = 2) -> int:
    """Smallest ``n`` with :func:`min_detectable_tv` ``(n) <= tv``."""
    if not 0 < tv <= 1:
        raise ValueError("tv must be in (0, 1]")
    lo, hi = 1, 2
    while min_detectable_tv(hi, alpha, power, n_tests) > tv:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if min_detectable_tv(mid, alpha, power, n_tests) <= tv:
            hi = mid
        else:
            lo = mid + 1
    return lo
