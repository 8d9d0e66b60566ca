"""Which A/A speed-noise calibration a run's speed intervals include (the run's manifest against the files)."""

from __future__ import annotations

from pathlib import Path

from specbench.results.manifest import RunManifest
from specbench.results.noise_calibration import (
    NoiseCalibration,
    applying,
    check_applies,
    find_noise,
    load_noise,
)


def run_speed_noise(run_dir: Path, manifest: RunManifest, noise: Path | None) -> tuple[NoiseCalibration | None, str | None]:
    """(the calibration a run's speed intervals include or None, why one found was not used).

    ``noise`` when given (it must apply); else ``noise.json`` beside the run; else the suite's
    ``speed_noise`` file, each when it is of the run's hardware class and suite."""
    from specbench.config.suite import resolve_path

    hw, suite = manifest.hardware_class, manifest.suite_name
    if noise is None:
        cal, why = find_noise(run_dir, hw, suite)
        named, suite_path = manifest.suite.speed_noise if manifest.suite else None, manifest.suite_path
        if cal is not None or not named or not suite_path:
            return cal, why
        cal, why_suite = applying(resolve_path(named, Path(suite_path).parent), hw, suite)
        return cal, "; ".join(filter(None, [why, why_suite])) or None
    cal = load_noise(noise)
    check_applies(cal, hw, suite, noise)
    return cal, None
