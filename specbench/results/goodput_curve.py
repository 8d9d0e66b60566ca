"""Typed parts of ``summary.json`` for goodput under SLOs (issue 52): each method's goodput against no
speculation at every load, and the load where speculation stops raising it.

A group's own goodput (requests meeting every SLO per second of its cells' wall time) and the share of its
requests meeting them are the group's ``goodput`` and ``goodput_share``
(:class:`~specbench.results.summary.GroupSummary`); the ratios, verdicts and the load where speculation stops
raising goodput are here, computed by :mod:`specbench.analysis.goodput`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from specbench.config.suite import SLOSpec
from specbench.stats import Estimate

#: A goodput ratio's verdict: with speed rounds the headline's rule (``higher`` / ``lower`` beyond ±5 %,
#: ``same`` within, else ``undecided``); measured in one go, whether its interval holds 1 (``higher`` /
#: ``lower`` / ``not distinguishable``); ``no data``: no ratio (no baseline request met the SLOs).
GoodputVerdict = Literal["higher", "lower", "same", "undecided", "not distinguishable", "no data"]
LoadAxis = Literal["concurrency", "request_rate"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GoodputPoint(_Model):
    """A method's goodput over the baseline's at one load (the same target, dataset, temperature and load)."""

    batch_size: int  # the load's concurrency / batch size; with request_rate, its cap on requests in flight
    request_rate: float | None = None
    group_id: str  # the method's group (its goodput: that group's ``goodput``)
    baseline_group: str
    #: goodput(method) / goodput(baseline) (speed_estimators.goodput_ratio): with speed rounds the geometric mean
    #: of the per-round ratios with the headline rule's confidence sequence (n: rounds), else the pooled ratio
    #: with a bootstrap over prompts paired across the arms, the wall times held fixed (n: prompts)
    ratio: Estimate
    verdict: GoodputVerdict
    rounds: int | None = None  # the rounds the verdict rests on (None: decided on the pooled interval)
    rounds_to_decide: int | None = None  # undecided: the rounds at which the rule would decide if ratio and spread held
    note: str | None = None  # why a run with rounds was decided on the pooled interval instead

    @property
    def load(self) -> float:
        """The point's place on its curve's axis (a concurrency or a request rate)."""
        return self.request_rate if self.request_rate is not None else float(self.batch_size)


class GoodputCurve(_Model):
    """One method's goodput ratio to no speculation along one load axis, and where it stops rising above 1.

    ``raises_up_to``: the highest load at which the verdict is ``higher``; ``stops_at``: the lowest load from
    which on no measured load's verdict is ``higher`` (speculation not shown to raise goodput there or above;
    the lowest load when it raises it nowhere); None: it raises goodput at the highest load measured.
    """

    target: str
    dataset: str
    temperature: float
    slice_id: str | None = None  # an input-length group's slice
    method: str
    method_kind: str
    k: int | None = None
    axis: LoadAxis
    points: list[GoodputPoint]
    raises_up_to: float | None = None
    stops_at: float | None = None


class GoodputSummary(_Model):
    """The run's goodput part: the suite's SLOs (ms, vLLM's names) and every method's curve."""

    slo: SLOSpec
    curves: list[GoodputCurve]
