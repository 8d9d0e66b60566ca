"""Step detection in a metric's history (pure; the idea of asv's ``step_detect``).

A series of run values is fitted by a piecewise-constant function: each
segment is summarised by its median and costs the sum of absolute
deviations from it (robust to a single odd run); each extra segment costs a
penalty ``γ``. The fit minimising total cost is found exactly by dynamic
programming over segment ends (Potts / optimal partitioning). ``γ`` scales
with the noise ``σ`` of the series, the larger of

* the run-to-run spread: 1.4826 · median |y[i+1] − y[i]| / √2 (a robust σ
  that a step moves only once), and
* the runs' own uncertainty: the median half-width of their 95% intervals / 1.96,

so ``γ = penalty · σ · log(n + 1)``. A single run inside the series does not
make a level (it joins the level before it; the newest run may). Adjacent segments whose levels differ by
less than ``min_sigmas · σ`` are merged afterwards: a step is a change the
runs' own noise does not explain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_POINTS = 300  # the fit is O(n^3); older points than this are not searched


@dataclass(frozen=True)
class Step:
    """The series changes level at ``index`` (the first point of the new level)."""

    index: int
    before: float
    after: float

    @property
    def change(self) -> float:
        return self.after - self.before

    @property
    def rel_change(self) -> float | None:
        return self.change / abs(self.before) if self.before else None


def noise_sigma(values: Sequence[float], half_widths: Sequence[float | None] | None = None) -> float:
    y = np.asarray(values, float)
    spread = 1.4826 * float(np.median(np.abs(np.diff(y)))) / math.sqrt(2) if len(y) > 2 else 0.0
    hw = [h for h in (half_widths or []) if h is not None and h > 0 and math.isfinite(h)]
    own = float(np.median(hw)) / 1.96 if hw else 0.0
    scale = float(np.median(np.abs(y))) if len(y) else 0.0
    return max(spread, own, 1e-6 * scale, 1e-12)


def _segments(y: np.ndarray, gamma: float) -> list[tuple[int, int]]:
    """Optimal partition [(start, end)) of ``y`` under L1-to-median cost plus ``gamma`` per segment."""
    n = len(y)
    cost = np.full((n + 1, n + 1), np.inf)
    for i in range(n):
        for j in range(i + 1, n + 1):
            seg = y[i:j]
            cost[i, j] = float(np.abs(seg - np.median(seg)).sum())
    best = np.zeros(n + 1)
    prev = np.zeros(n + 1, int)
    for j in range(1, n + 1):
        cands = best[:j] + cost[:j, j] + gamma
        i = int(np.argmin(cands))
        best[j], prev[j] = cands[i], i
    out = []
    j = n
    while j > 0:
        out.append((int(prev[j]), j))
        j = int(prev[j])
    return out[::-1]


def detect_steps(
    values: Sequence[float],
    half_widths: Sequence[float | None] | None = None,
    *,
    penalty: float = 2.0,
    min_sigmas: float = 2.0,
) -> list[Step]:
    """Every level change in ``values`` (oldest first); ``half_widths``: each run's interval half-width."""
    y_all = np.asarray(values, float)
    off = max(0, len(y_all) - MAX_POINTS)
    y = y_all[off:]
    hws = list(half_widths)[off:] if half_widths is not None else None
    if len(y) < 2 or not np.all(np.isfinite(y)):
        return []
    sigma = noise_sigma(list(y), hws)
    segs = _segments(y, penalty * sigma * math.log(len(y) + 1))
    # one odd run inside the series is not a level: fold it into its earlier neighbour
    segs = [s for i, s in enumerate(segs) if not (0 < i < len(segs) - 1 and s[1] - s[0] == 1)] or segs
    segs = [(a[0], b[0]) for a, b in zip(segs, segs[1:], strict=False)] + [(segs[-1][0], len(y))]
    if segs[0][0] != 0:
        segs[0] = (0, segs[0][1])
    merged: list[tuple[int, int]] = [segs[0]]
    for s in segs[1:]:
        a = merged[-1]
        if abs(float(np.median(y[s[0]:s[1]])) - float(np.median(y[a[0]:a[1]]))) < min_sigmas * sigma:
            merged[-1] = (a[0], s[1])
        else:
            merged.append(s)
    return [Step(index=off + b[0], before=float(np.median(y[a[0]:a[1]])), after=float(np.median(y[b[0]:b[1]])))
            for a, b in zip(merged, merged[1:], strict=False)]


def current_step(
    values: Sequence[float],
    half_widths: Sequence[float | None] | None = None,
    *,
    higher_is_better: bool = True,
    **kw: float,
) -> Step | None:
    """The step that starts the series' latest level when that level is worse than the one before."""
    steps = detect_steps(values, half_widths, **kw)
    if not steps:
        return None
    last = steps[-1]
    worse = last.change < 0 if higher_is_better else last.change > 0
    return last if worse else None
