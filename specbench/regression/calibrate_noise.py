"""Computing a speed-noise calibration from identical-code (A/A) runs, per hardware class (issue 22),
and what its floors let a gate catch.

For each speed metric of the catalogue (per group: speedup, output tok/s, TPOT, …; per headline
row: the speedup ratio) and every pair of A/A runs, the relative change of each group (or
headline row) both runs measured is taken; the calibrated floor is the 95th percentile of those
absolute changes divided by √2, so that each run's interval widened by that percent of its value
(:func:`specbench.stats.with_between_run` in the analysis; the gate's ``noise_floor_pct``, see
:func:`specbench.regression.run_diff.floor_interval`) makes the difference interval of two
identical runs cover their change in 95 % of groups (the MOVER combination adds the two
half-widths in quadrature). The model and its file live in :mod:`specbench.results.noise_calibration`;
adding a calibration to a summary's intervals in :mod:`specbench.analysis.apply_noise`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

from specbench.regression.run_diff import estimates_of, headline_key
from specbench.results import metric_catalog as catalog
from specbench.results.noise_calibration import QUANTILE, MetricNoise, NoiseCalibration, NoiseError
from specbench.results.summary import RunSummary
from specbench.stats import Estimate

__all__ = ["aa_noise_calibration", "detectable_drop_pct", "floor_for_power", "relative_changes", "speed_metric_names"]

_GROUP_SPEED = catalog.speed_specs("group")


def speed_metric_names() -> list[str]:
    """The speed metrics a calibration covers: per group and the headline's speedup ratio."""
    return [m.name for m in (*catalog.speed_specs("group"), *catalog.speed_specs("headline"))]


def _group_estimates(s: RunSummary) -> dict[str, dict[str, Estimate]]:
    return {g.group_id: estimates_of(g, _GROUP_SPEED) for g in s.groups if g.status in ("ok", "partial")}


def _headline_estimates(s: RunSummary) -> dict[str, dict[str, Estimate]]:
    return {headline_key(r): {"speedup_ratio": r.speedup_ratio} for r in s.headline}


def relative_changes(summaries: Sequence[RunSummary], metric: str) -> list[float]:
    """|new − base| / |base| of ``metric`` for every group (or headline row) two runs both measured,
    over all run pairs."""
    spec = catalog.spec(metric)
    source = spec.source if spec is not None else "group"
    of: Callable[[RunSummary], dict[str, dict[str, Estimate]]] = \
        _headline_estimates if source == "headline" else _group_estimates
    per_run = [of(s) for s in summaries]
    out: list[float] = []
    for a, b in itertools.combinations(per_run, 2):
        for key in a.keys() & b.keys():
            ea, eb = a[key].get(metric), b[key].get(metric)
            if ea is None or eb is None or ea.value is None or eb.value is None or ea.value == 0:
                continue
            out.append(abs(eb.value - ea.value) / abs(ea.value))
    return out


def aa_noise_calibration(summaries: Sequence[RunSummary], hardware_class: str) -> NoiseCalibration:
    """A calibration from ≥ 2 identical-code runs of one suite on one hardware class."""
    if len(summaries) < 2:
        raise NoiseError("a noise calibration needs at least 2 identical-code runs")
    suites = {s.suite_name for s in summaries}
    if len(suites) != 1:
        raise NoiseError(f"a noise calibration needs runs of one suite, got {sorted(suites)}")
    metrics = {}
    for name in speed_metric_names():
        changes = relative_changes(summaries, name)
        if changes:
            q = float(np.quantile(changes, QUANTILE))
            metrics[name] = MetricNoise(noise_floor_pct=round(100 * q / math.sqrt(2), 3),
                                        pairs=len(summaries) * (len(summaries) - 1) // 2, changes=len(changes),
                                        max_change_pct=round(100 * max(changes), 3))
    return NoiseCalibration(hardware_class=hardware_class, suite=suites.pop(),
                            runs=[s.run_id for s in summaries], metrics=metrics)


def floor_for_power(drop_pct: float, widen: float, power: float = 0.9) -> float:
    """The largest calibrated floor (percent) at which a gate catches a true ``drop_pct`` % drop of a
    higher-is-better speed metric in ``power`` of (planted run, identical-code run) pairs.

    The gate fails a group when the difference interval lies below 0 (``run_diff.metric_change``):
    ``d + widen · hypot(f·(1 − drop), f) < 0`` with each run's interval ±f of its value (the floor);
    between runs each value moves by a normal error of sd ``f / 1.96`` (what a floor at the 95th
    percentile says), so ``d`` has sd ``hypot(1 − drop, 1) · f / 1.96``. Solving
    ``P(fail) = power`` for ``f`` gives the floor. The measured floor shrinks as 1/√(seconds a group
    is measured), so ``(floor / this)²`` is how many times longer a suite must measure each group.
    """
    drop = drop_pct / 100
    spread = math.hypot(1 - drop, 1)
    z_power = NormalDist().inv_cdf(power)
    z95 = NormalDist().inv_cdf(0.975)
    return 100 * drop / (spread * (widen + z_power / z95))


def detectable_drop_pct(floor_pct: float, widen: float, power: float = 0.9) -> float | None:
    """The smallest drop (percent) a gate with intervals ±``floor_pct`` widened ``widen`` times catches in
    ``power`` of reruns: :func:`floor_for_power` solved for the drop (it grows with the drop). None when
    even a drop of 99 % is not caught that often."""
    if floor_for_power(99.0, widen, power) < floor_pct:
        return None
    lo, hi = 0.0, 99.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if floor_for_power(mid, widen, power) < floor_pct else (lo, mid)
    return hi

