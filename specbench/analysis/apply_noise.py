"""Applying a speed-noise calibration: between-run noise in a run's speed intervals (pure; issue 22).

A speed interval computed inside one run covers the spread over its prompts (and, with speed rounds,
the drift between rounds), not what moves a whole run: the same code, rerun half an hour later on the
same machine, lands elsewhere. An A/A calibration (:mod:`specbench.results.noise_calibration`,
computed by :mod:`specbench.regression.calibrate_noise`) measures that per speed metric;
:func:`with_speed_noise` adds it, in quadrature (:func:`specbench.stats.with_between_run`), to every
speed number of a summary:

* each group's (and slice's) speed metrics of the catalogue (speedup, output tok/s, TPOT, …);
* the headline's speedup ratio (its own calibrated floor) and the two speedups beside it; the headline
  verdict is decided again on the widened ratio, so *faster* / *slower* hold across reruns;
* the K sweeps' per-K speedup, tok/s, TPOT and step time, and the category matrix's speedups;
* under a suite's SLOs, each method's goodput ratio to no speculation (with goodput's floor), its verdicts and
  the load where speculation stops raising goodput decided again.

τ, acceptance, identity and accuracy are not timed and stay as they are. The calibration goes into the
summary (``extra.speed_noise``), so the report says what the intervals include.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from specbench.analysis.goodput_vs_load import with_between_run_noise
from specbench.analysis.method_comparison import speedup_ratio_verdict
from specbench.results import metric_catalog as catalog
from specbench.results.noise_calibration import NoiseCalibration
from specbench.results.summary import RunSummary
from specbench.stats import Estimate, with_between_run

M = TypeVar("M", bound=BaseModel)

_GROUP_SPEED = {m.summary_field: m.name for m in catalog.speed_specs("group")}


def _widened(model: M, fields: dict[str, str], cal: NoiseCalibration) -> M:
    """``model`` with each Estimate field in ``fields`` (field → the metric whose floor applies) widened; a
    dotted field (``non_degenerate.speedup``) is a nested part's."""
    update: dict[str, Any] = {}
    nested: dict[str, dict[str, str]] = {}
    for field, metric in fields.items():
        head, _, rest = field.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = metric
            continue
        e = getattr(model, field, None)
        floor = cal.floor_pct(metric)
        if isinstance(e, Estimate) and floor:
            update[field] = with_between_run(e, floor)
    for head, sub in nested.items():
        part = getattr(model, head, None)
        if isinstance(part, BaseModel):
            update[head] = _widened(part, sub, cal)
    return model.model_copy(update=update) if update else model


def with_speed_noise(summary: RunSummary, cal: NoiseCalibration) -> RunSummary:
    """A new summary whose speed intervals include the calibrated between-run noise (see the module)."""
    if summary.extra.speed_noise is not None:
        raise ValueError(f"run {summary.run_id}: its speed intervals already include a calibration")
    groups = [_widened(g, _GROUP_SPEED, cal) for g in summary.groups]
    headline = []
    for r in summary.headline:
        r = _widened(r, {"speedup_ratio": "speedup_ratio", "method_speedup": "speedup",
                         "reference_speedup": "speedup"}, cal)
        headline.append(r.model_copy(update={"verdict": speedup_ratio_verdict(r.speedup_ratio, r.rounds)}))
    point_fields = {"speedup": "speedup", "output_tps": "output_tps", "tpot_s": "tpot_s", "step_time_s": "step_time_s"}
    sweeps = [s.model_copy(update={"points": [_widened(p, point_fields, cal) for p in s.points]})
              for s in summary.k_sweeps]
    matrix = [_widened(c, {"speedup": "speedup"}, cal) for c in summary.extra.category_matrix]
    gp = summary.extra.goodput
    if gp is not None:
        gp = gp.model_copy(update={"curves": [with_between_run_noise(c, cal.floor_pct("goodput")) for c in gp.curves]})
    extra = summary.extra.model_copy(update={"speed_noise": cal, "category_matrix": matrix, "speed_noise_note": None,
                                             "goodput": gp})
    return summary.model_copy(update={"groups": groups, "headline": headline, "k_sweeps": sweeps, "extra": extra})
