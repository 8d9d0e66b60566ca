"""Speed noise floors calibrated on identical-code (A/A) runs, per hardware class (issue 22).

Within-run speed intervals see the spread over prompts (and, with rounds, the drift
between rounds) but not what moves a whole run: another run half an hour later on the
same machine. A/A runs measure it. For each speed metric (the catalogue's ``speed``
metrics that ``gate`` compares) and every pair of A/A runs, the relative change of each
group both measured is taken; the calibrated floor is the 95th percentile of those
absolute changes divided by √2, so that each run's interval widened to at least that
percent of its value (the gate's ``noise_floor_pct``, see
:func:`specbench.regression.run_diff.floor_interval`) makes the difference interval of
two identical runs cover their change in 95 % of groups (the MOVER combination adds the
two half-widths in quadrature).

The calibration is a small JSON file (``specbench gate --noise FILE``; written by
``benchmarks/aa_gate.py --write-noise FILE``), kept per hardware class: the gate uses a
calibration only for runs on the class it was made on.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specbench.regression.run_diff import metric_estimates
from specbench.results import metric_catalog as catalog
from specbench.results.summary import RunSummary

QUANTILE = 0.95


class MetricNoise(BaseModel):
    model_config = ConfigDict(extra="forbid")

    noise_floor_pct: float = Field(ge=0)
    pairs: int  # run pairs it was measured on
    changes: int  # (pair, group) changes it rests on
    max_change_pct: float


class NoiseCalibration(BaseModel):
    """Per speed metric, the noise floor for one hardware class and suite."""

    model_config = ConfigDict(extra="forbid")

    hardware_class: str
    suite: str
    runs: list[str]
    metrics: dict[str, MetricNoise]

    def floor_pct(self, metric: str) -> float | None:
        m = self.metrics.get(catalog.family(metric))
        return None if m is None else m.noise_floor_pct


class NoiseError(ValueError):
    pass


def speed_metric_names() -> list[str]:
    """The speed metrics ``gate`` compares (their noise needs a calibration)."""
    return [m.name for m in catalog.gate_metrics() if m.speed]


def relative_changes(summaries: Sequence[RunSummary], metric: str) -> list[float]:
    """|new − base| / |base| of ``metric`` for every group two runs both measured, over all run pairs."""
    per_run = [{g.group_id: metric_estimates(g) for g in s.groups if g.status in ("ok", "partial")}
               for s in summaries]
    out: list[float] = []
    for a, b in itertools.combinations(per_run, 2):
        for gid in a.keys() & b.keys():
            ea, eb = a[gid].get(metric), b[gid].get(metric)
            if ea is None or eb is None or ea.value is None or eb.value is None or ea.value == 0:
                continue
            out.append(abs(eb.value - ea.value) / abs(ea.value))
    return out


def calibrate(summaries: Sequence[RunSummary], hardware_class: str) -> NoiseCalibration:
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


def load_noise(path: Path) -> NoiseCalibration:
    try:
        return NoiseCalibration.model_validate(json.loads(Path(path).read_text()))
    except OSError as exc:
        raise NoiseError(f"{path}: cannot read the noise calibration: {exc}") from None
    except (json.JSONDecodeError, ValidationError) as exc:
        raise NoiseError(f"{path}: not a noise calibration: {exc}") from None


def save_noise(cal: NoiseCalibration, path: Path) -> None:
    Path(path).write_text(cal.model_dump_json(indent=2) + "\n")
