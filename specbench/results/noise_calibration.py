"""The stored speed-noise calibration: its model, its file and whether it applies to a run (issue 22).

Speed noise has three homes, one per concern: this module (what a calibration is and where it is
kept), :mod:`specbench.regression.calibrate_noise` (computing one from A/A runs) and
:mod:`specbench.analysis.apply_noise` (adding it to a summary's speed intervals).

Within-run speed intervals see the spread over prompts (and, with rounds, the drift between rounds)
but not what moves a whole run: another run half an hour later on the same machine. A/A runs measure
it (:func:`specbench.regression.calibrate_noise.aa_noise_calibration`, ``specbench calibrate RUN RUN ...``). Per speed metric
the calibration holds a *noise floor*: the 95th percentile of the relative change between two
identical-code runs, over every pair and group, divided by √2 — the between-run half-width of one
run's 95 % interval, as a percent of its value.

The calibration is used in two places: the analysis adds it to a run's speed intervals
(:mod:`specbench.analysis.apply_noise`, with :func:`specbench.stats.with_between_run`, so the report's speed intervals and the headline's
faster/slower verdicts include run-to-run drift), and ``gate`` / ``compare`` test speed against a
single baseline run with it. A calibration belongs to one hardware class and one suite: it is stored
as a small JSON file, by default ``noise.json`` beside the suite's runs (``results/<suite>/noise.json``),
where ``specbench run`` and ``specbench analyze`` find it for runs on the same hardware class.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specbench.errors import SpecbenchError
from specbench.results import metric_catalog as catalog

#: The file a suite's calibration is kept in, beside its runs (``results/<suite>/noise.json``).
NOISE_FILE = "noise.json"
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

    def describe(self) -> str:
        """'A/A calibration on 3 identical-code runs of cpu-smoke on <hw>: speedup ±5.5 %, …'."""
        floors = ", ".join(f"{catalog.label(k)} ±{m.noise_floor_pct:.1f} %" for k, m in sorted(self.metrics.items()))
        return (f"A/A calibration on {len(self.runs)} identical-code runs of {self.suite} on {self.hardware_class}"
                + (f": {floors}" if floors else ""))


class NoiseError(SpecbenchError, ValueError):
    """A calibration that cannot be read or does not apply (another hardware class or suite)."""


def load_noise(path: Path) -> NoiseCalibration:
    try:
        return NoiseCalibration.model_validate(json.loads(Path(path).read_text()))
    except OSError as exc:
        raise NoiseError(f"{path}: cannot read the noise calibration: {exc}") from None
    except (json.JSONDecodeError, ValidationError) as exc:
        raise NoiseError(f"{path}: not a noise calibration: {exc}") from None


def save_noise(cal: NoiseCalibration, path: Path) -> None:
    Path(path).write_text(cal.model_dump_json(indent=2) + "\n")


def check_applies(cal: NoiseCalibration, hardware_class: str | None, suite: str, source: object) -> None:
    """Refuse a calibration made on another hardware class or suite (its floors would not hold)."""
    if hardware_class is not None and cal.hardware_class != hardware_class:
        raise NoiseError(f"{source}: calibrated on {cal.hardware_class!r}, the run is on {hardware_class!r}")
    if cal.suite != suite:
        raise NoiseError(f"{source}: calibrated on runs of suite {cal.suite!r}, the run is of {suite!r}")


def applying(path: Path, hardware_class: str | None, suite: str) -> tuple[NoiseCalibration | None, str | None]:
    """The calibration in ``path`` if the file exists and applies to the run, else None, with a note
    saying why one was not used (None when there is no file)."""
    if not Path(path).exists():
        return None, None
    try:
        cal = load_noise(path)
        check_applies(cal, hardware_class, suite, path)
    except NoiseError as exc:
        return None, f"not used: {exc}"
    return cal, None


def find_noise(run_dir: Path, hardware_class: str | None, suite: str) -> tuple[NoiseCalibration | None, str | None]:
    """The calibration kept beside a run (``<suite results>/noise.json``), see :func:`applying`."""
    return applying(Path(run_dir).parent / NOISE_FILE, hardware_class, suite)
