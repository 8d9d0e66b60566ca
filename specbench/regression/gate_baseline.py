"""The regression gate's baseline: a stored run (a run directory holding ``summary.json``, or that file) or a
small JSON file of expected values::

    {"groups": {"<group_id>": {
        "tau":      {"value": 2.5, "ci_low": 2.4, "ci_high": 2.6, "tolerance_pct": 3},
        "speedup":  {"value": 1.8},
        "accuracy.exact_match": {"value": 0.78, "ci_low": 0.71, "ci_high": 0.85, "tolerance_abs": 0.02}}}}

Metric names: ``tau``, ``tau_per_request``, ``per_position.<i>`` (1-based),
``output_tps``, ``speedup``, ``greedy_match``, ``accuracy.<key>``. An
expected value without an interval is taken as exact (only the new run's
interval counts); ``tolerance_pct``/``tolerance_abs`` replace the rule's
threshold for that metric. :func:`expected_from_run` writes this format from a run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator

from specbench.regression.gate_rules import GateConfigError, StrictGateModel, validation_lines
from specbench.regression.run_diff import metric_estimates
from specbench.results import metric_catalog as catalog
from specbench.results import rundir
from specbench.results.migrations import SchemaError
from specbench.results.summary import RunSummary
from specbench.stats import Estimate


def gated_name(name: str) -> bool:
    """Whether ``name`` is a gated metric (``per_position.<i>``, ``accuracy.<key>``), by the catalogue now."""
    return re.match(catalog.metric_pattern(), name) is not None


class ExpectedMetric(StrictGateModel):
    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    tolerance_pct: float | None = Field(None, ge=0)
    tolerance_abs: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _bracket(self) -> ExpectedMetric:
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError("give both ci_low and ci_high, or neither")
        if self.ci_low is not None and self.ci_high is not None and not self.ci_low <= self.value <= self.ci_high:
            raise ValueError("need ci_low <= value <= ci_high")
        return self

    def estimate(self) -> Estimate:
        lo = self.value if self.ci_low is None else self.ci_low
        hi = self.value if self.ci_high is None else self.ci_high
        return Estimate(value=self.value, ci_low=lo, ci_high=hi, n=self.n, method="expected")


class ExpectedValues(StrictGateModel):
    description: str | None = None
    groups: dict[str, dict[str, ExpectedMetric]]

    @field_validator("groups")
    @classmethod
    def _names(cls, v: dict[str, dict[str, ExpectedMetric]]) -> dict[str, dict[str, ExpectedMetric]]:
        for gid, metrics in v.items():
            for name in metrics:
                if not gated_name(name):
                    raise ValueError(f"{gid}: unknown metric {name!r} (use {catalog.gate_names_help()})")
        return v


def expected_from_run(summary: RunSummary, tolerance_pct: float | None = None) -> ExpectedValues:
    """Expected values (with the run's intervals) for every measured group of a run."""
    groups = {}
    for g in summary.groups:
        metrics = {k: ExpectedMetric(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high, n=e.n,
                                     tolerance_pct=tolerance_pct)
                   for k, e in metric_estimates(g).items() if e.value is not None}
        if metrics:
            groups[g.group_id] = metrics
    return ExpectedValues(description=f"from run {summary.run_id}", groups=groups)


def load_baseline(path: Path) -> RunSummary | ExpectedValues:
    """A stored run (directory or summary.json) or an expected-values JSON file."""
    path = Path(path)
    if path.is_dir() or path.name == rundir.SUMMARY:  # a stored run: results/ reads it
        try:
            return rundir.read_summary(path)
        except rundir.StoreError as exc:
            raise GateConfigError(str(exc)) from None
        except ValidationError as err:
            raise GateConfigError(validation_lines(str(path), err)) from None
    file = path
    try:
        data = json.loads(file.read_text())
    except OSError as exc:
        raise GateConfigError(f"{file}: cannot read baseline: {exc}") from None
    except json.JSONDecodeError as exc:
        raise GateConfigError(f"{file}: invalid JSON: {exc}") from None
    if not isinstance(data, dict) or "groups" not in data:
        raise GateConfigError(f"{file}: not a run summary nor expected values (no 'groups')")
    try:
        return RunSummary.load(data) if isinstance(data["groups"], list) else ExpectedValues.model_validate(data)
    except SchemaError as exc:
        raise GateConfigError(f"{file}: {exc}") from None
    except ValidationError as err:
        raise GateConfigError(validation_lines(str(file), err)) from None
