"""Interval estimates (pure: numpy/scipy, seeded, no clocks or I/O).

Every number specbench reports is an :class:`Estimate`: a value, a 95%
interval and the n it rests on. Bootstrap intervals are percentile intervals
over resampled *units* (requests or prompts), seeded so that the same
records always give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats as sps

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20260101
CONFIDENCE = 0.95


class Estimate(BaseModel):
    """A value with its 95% interval and sample size.

    ``method`` names how the interval was computed (``bootstrap``,
    ``wilson``, ``t``, ``exact`` or ``none`` when it could not be).
    """

    model_config = ConfigDict(extra="forbid")

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    method: str = "none"

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


def empty(n: int = 0) -> Estimate:
    return Estimate(value=None, n=n)


def bootstrap(
    units: Sequence[object] | np.ndarray,
    statistic: Callable[[np.ndarray], float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """Percentile bootstrap of ``statistic`` over resampled units.

    ``units`` is an array whose first axis indexes the resampled unit
    (e.g. rows of ``[accepted, drafts]`` per request); ``statistic``
    receives a resampled array of the same shape and returns a float. NaN
    resamples (e.g. a ratio with a zero denominator) are dropped.
    """
    arr = np.asarray(units, dtype=float)
    n = int(arr.shape[0]) if arr.ndim else 0
    if n == 0:
        return empty()
    value = float(statistic(arr))
    if n == 1:
        return Estimate(value=value, n=1, method="none")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    reps = np.array([statistic(arr[i]) for i in idx], dtype=float)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return Estimate(value=value, n=n, method="none")
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(reps, [alpha, 1 - alpha])
    return Estimate(value=value, ci_low=float(lo), ci_high=float(hi), n=n, method="bootstrap")


def mean_ci(values: Sequence[float] | np.ndarray) -> Estimate:
    """Mean with a bootstrap interval."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return bootstrap(np.asarray(vals), lambda a: float(np.mean(a)))


def ratio_ci(num: Sequence[float] | np.ndarray, den: Sequence[float] | np.ndarray) -> Estimate:
    """sum(num)/sum(den) with a bootstrap over the paired units."""
    pairs = np.column_stack([np.asarray(num, float), np.asarray(den, float)]) if len(num) else np.empty((0, 2))
    return bootstrap(pairs, _ratio)


def _ratio(a: np.ndarray) -> float:
    d = a[:, 1].sum()
    return float(a[:, 0].sum() / d) if d > 0 else float("nan")


def wilson(successes: int, n: int, confidence: float = CONFIDENCE) -> Estimate:
    """Wilson score interval for a proportion."""
    if n == 0:
        return empty()
    z = float(sps.norm.ppf(1 - (1 - confidence) / 2))
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return Estimate(value=p, ci_low=max(0.0, centre - half), ci_high=min(1.0, centre + half), n=n, method="wilson")


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
