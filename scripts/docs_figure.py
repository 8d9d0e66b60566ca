"""Write the README's figure from a cpu-smoke run: ``python scripts/docs_figure.py RUN_DIR``.

The figure is the report's own "time per decoding step against K" (specbench.report.plots), read
from the run's summary.json; it goes to docs/img/cpu-smoke-step-time.png. Say the run's date where
the figure is quoted (docs/measurements.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from specbench.report.plots import make_figures
from specbench.results import rundir

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "cpu-smoke-step-time.png"


def main(run_dir: str) -> None:
    figures = make_figures(rundir.read_summary(Path(run_dir)))
    if "step_time_vs_k" not in figures:
        sys.exit(f"{run_dir}: no K sweep with step times: not a cpu-smoke run?")
    OUT.write_bytes(figures["step_time_vs_k"])
    print(f"{OUT} ({OUT.stat().st_size // 1024} KiB) from {run_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
