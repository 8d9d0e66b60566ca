"""What ``specbench trend`` shows, computed from the history database: per suite and hardware class, each
group's metrics over the stored runs, the steps detected in each series (:mod:`specbench.regression.changepoints`)
and each series' latest relative change. :mod:`specbench.report.trend` renders these pages; it computes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench.regression.changepoints import Step, detect_steps
from specbench.regression.history import History, Point, RunInfo
from specbench.results import metric_catalog as catalog


@dataclass
class Series:
    """One metric of one group over the runs (points with a value or a verdict only), and its detected steps."""

    group_id: str
    metric: str
    points: list[Point]
    steps: list[Step] = field(default_factory=list)

    @property
    def is_verdict(self) -> bool:
        return any(p.verdict is not None for p in self.points)

    def worse_steps(self) -> list[Step]:
        """The steps to a worse level (by the metric's direction in the catalogue)."""
        hib = catalog.higher_is_better(self.metric)
        return [s for s in self.steps if (s.change < 0 if hib else s.change > 0)]

    def latest_change_pct(self) -> float | None:
        """100 · (latest − previous) / |previous| of a numeric series (None: fewer than two points, a verdict
        series, or a previous value of 0)."""
        if len(self.points) < 2 or self.is_verdict:
            return None
        a, b = self.points[-2].estimate.value, self.points[-1].estimate.value
        if not a or b is None:
            return None
        return 100 * (b - a) / abs(a)


@dataclass
class TrendPage:
    """One suite on one hardware class: its runs, oldest first, and every (group, metric) series."""

    suite: str
    hardware_class: str
    runs: list[RunInfo]
    series: dict[tuple[str, str], Series]


def build_pages(hist: History, suite: str | None = None) -> list[TrendPage]:
    """Every suite's (or ``suite``'s) pages, one per hardware class, the class with the most runs first."""
    pages = []
    for s in [suite] if suite else hist.suites():
        runs_all = hist.runs(suite=s)
        for hwc in sorted({r.hardware_class for r in runs_all}, key=lambda h: -sum(r.hardware_class == h
                                                                                    for r in runs_all)):
            runs = [r for r in runs_all if r.hardware_class == hwc]
            series = {}
            for key, pts in hist.series(runs).items():
                pts = [p for p in pts if p.estimate.value is not None or p.verdict is not None]
                if not pts:
                    continue
                numeric = all(p.estimate.value is not None for p in pts)
                steps = detect_steps([float(p.estimate.value or 0.0) for p in pts],
                                     [p.estimate.half_width for p in pts]) if numeric and len(pts) >= 3 else []
                series[key] = Series(key[0], key[1], pts, steps)
            pages.append(TrendPage(s, hwc, runs, series))
    return pages
