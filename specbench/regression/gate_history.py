"""``specbench gate NEW_RUN --baseline history[:N]``: gate against the recent past.

The baseline of each group's metric is the **median of its last N runs** of
the same suite on the same hardware class (PyTorch's vLLM dashboard does the
same: one earlier run is too noisy a baseline); a metric measured in fewer
than half of the window's runs has no baseline. Its interval is the larger
of the window's run-to-run spread (1.96 · 1.4826 · MAD, what a new run may
drift by) and the precision of the median from the runs' own intervals
(median half-width / √N). A metric regresses, as in :mod:`specbench.regression.gate`,
only when its drop is beyond the rule's threshold AND the difference
interval (the new run's own interval against the window's) lies on the bad
side of 0.

For a failing metric, step detection (:mod:`specbench.regression.changepoints`) over the
whole history on that hardware class plus the new run names the run where
the worse level began: an earlier stored run when the step is already in the
history, or the new run itself.
"""

from __future__ import annotations

import math
import re

import numpy as np

from specbench.regression.changepoints import current_step
from specbench.regression.gate import GateResult, evaluate_gate
from specbench.regression.gate_baseline import ExpectedMetric, ExpectedValues, gated_name
from specbench.regression.gate_rules import GateConfigError, GateRules
from specbench.regression.history import History, Point, RunInfo, group_metrics
from specbench.results import metric_catalog as catalog
from specbench.results.manifest import RunManifest
from specbench.results.noise_calibration import NoiseCalibration
from specbench.results.summary import RunSummary

DEFAULT_WINDOW = 5
_SPEC = re.compile(r"^history(?::([1-9][0-9]*))?$")


def history_window(spec: str) -> int | None:
    """N from ``history`` / ``history:N``; None when ``spec`` names a file instead."""
    m = _SPEC.match(spec.strip())
    if not m:
        return None
    return int(m.group(1)) if m.group(1) else DEFAULT_WINDOW


def window_baseline(points: list[Point]) -> ExpectedMetric | None:
    """Median of the window's values with the interval described in the module docstring."""
    vals = np.array([p.estimate.value for p in points if p.estimate.value is not None], float)
    if len(vals) == 0:
        return None
    med = float(np.median(vals))
    spread = 1.96 * 1.4826 * float(np.median(np.abs(vals - med))) if len(vals) >= 3 else 0.0
    hws = [h for h in (p.estimate.half_width for p in points) if h is not None]
    own = float(np.median(hws)) / math.sqrt(len(vals)) if hws else 0.0
    h = max(spread, own)
    return ExpectedMetric(value=med, ci_low=med - h, ci_high=med + h, n=len(vals))


def earlier_runs(hist: History, new: RunSummary, manifest: RunManifest) -> list[RunInfo]:
    """Stored runs of the suite on the new run's hardware class, before it (the new run itself excluded)."""
    runs = hist.runs(suite=new.suite_name, hardware_class=manifest.hardware_class)
    created = manifest.created_at or "9999"
    return [r for r in runs if r.run_id != new.run_id and r.created_at <= created]


def evaluate_history_gate(
    new: RunSummary, manifest: RunManifest, hist: History, window: int = DEFAULT_WINDOW,
    rules: GateRules | None = None, noise: NoiseCalibration | None = None,
) -> GateResult:
    rules = rules or GateRules()
    past = earlier_runs(hist, new, manifest)
    if not past:
        raise GateConfigError(f"history {hist.url}: no earlier run of suite {new.suite_name!r} on "
                              f"{manifest.hardware_class!r}; add runs with `specbench history add`")
    win = past[-window:]
    series = hist.series(past)
    in_window = {r.run_id for r in win}
    groups: dict[str, dict[str, ExpectedMetric]] = {}
    for (gid, metric), pts in series.items():
        in_win = [p for p in pts if p.run.run_id in in_window and p.estimate.value is not None]
        if not gated_name(metric) or 2 * len(in_win) < len(win):
            continue  # measured in fewer than half of the window's runs: no median to hold a run to
        base = window_baseline(in_win)
        if base is not None:
            groups.setdefault(gid, {})[metric] = base
    result = evaluate_gate(new, ExpectedValues(description="history", groups=groups), rules, noise=noise)
    result.baseline = (f"history: per metric, the median of the last {len(win)} runs of suite {new.suite_name} "
                       f"on {manifest.hardware_class} ({win[0].run_id} … {win[-1].run_id})")
    now = {g.group_id: group_metrics(g) for g in new.groups}
    for c in result.failures:
        est = now.get(c.group_id, {}).get(c.metric)
        pts = [p for p in series.get((c.group_id, c.metric)) or [] if p.estimate.value is not None]
        if not pts or est is None or est.value is None:
            continue
        step = current_step([float(p.estimate.value or 0.0) for p in pts] + [est.value],
                            [p.estimate.half_width for p in pts] + [est.half_width],
                            higher_is_better=catalog.higher_is_better(c.metric))
        if step is None:
            c.message += "; no step in the history (a drift or a single bad run)"
            continue
        first = pts[step.index].run if step.index < len(pts) else None
        c.first_run = first.run_id if first else new.run_id
        where = (f"run {first.run_id} ({first.created_at}, commit {(first.git_commit or '?')[:12]})"
                 if first else f"this run {new.run_id}")
        c.message += f"; step {step.before:.4g} → {step.after:.4g} first seen in {where}"
    return result
