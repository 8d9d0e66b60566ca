"""The derived-results schema (``summary.json``): rebuilt from raw records.

One :class:`GroupSummary` per (target, method, dataset, temperature, load);
repeats of a cell are pooled into their group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from specbench.config.plan import BaselineKey, baseline_key
from specbench.config.stop_rule import StopRecord
from specbench.config.suite import ReferenceValue
from specbench.results import degeneracy, metric_catalog
from specbench.results.migrations import SUMMARY_SCHEMA_VERSION, upgrade_summary
from specbench.results.parts import (
    CounterCheck,
    Equivalence,
    HeadlineRow,
    KSweep,
    NonDegenerate,
    SummaryExtra,
    VerificationSpent,
)
from specbench.results.records import SpecCounters
from specbench.results.slices import Slice
from specbench.stats import Estimate


class CellStatusLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cell_id: str
    status: str
    reason: str | None = None
    engine_log_tail: str | None = None
    stop: StopRecord | None = None  # the cell ran under a stop rule: prompts used of available, why it stopped


class TurnOneIdentity(BaseModel):
    """Of the conversations a later turn is judged on: how many had turn 1 identical to the baseline's."""

    model_config = ConfigDict(extra="forbid")

    identical: int
    conversations: int


class GroupSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_id: str
    target: str
    method: str
    method_kind: str
    k: int | None
    family: str | None = None  # the suite's method label when this group is one K of a sweep
    dataset: str
    temperature: float
    batch_size: int  # concurrency; with request_rate, the cap on requests in flight (0: none)
    request_rate: float | None = None  # Poisson load (requests/s) of server request-rate cells
    # The method's dynamic-speculation schedule [[lo, hi, K], ...] (vLLM picks K by each step's batch size).
    schedule: list[tuple[int, int, int]] | None = None
    # Why its outputs may differ from the target's by construction (None: lossless): not a drafter's numbers.
    lossy: str | None = None
    # The part of the group this summary covers (category, turn, input length, round; see
    # specbench.results.slices); None: the whole group. Its id is the group id's last segment.
    slice: Slice | None = None
    status: str  # ok | skipped | failed | partial
    reasons: list[str] = Field(default_factory=list)
    cells: list[CellStatusLine] = Field(default_factory=list)
    n_requests: int = 0
    n_errors: int = 0
    counters: SpecCounters | None = None
    # Acceptance (None for baseline).
    tau: Estimate | None = None
    tau_per_request: Estimate | None = None
    per_position: list[Estimate] = Field(default_factory=list)
    draft_acceptance_rate: Estimate | None = None
    # Tokens per target forward pass and what separates it from τ (specbench.analysis.step_accounting).
    tokens_per_step: Estimate | None = None
    tokens_per_step_per_request: Estimate | None = None
    terminal_overcount: Estimate | None = None
    draft_rate: Estimate | None = None
    steps_note: str | None = None  # how the steps are known when not every step was recorded
    # Speed.
    output_tokens: int = 0
    output_tps: Estimate | None = None  # per-stream decode rate: Σ tokens / Σ latency
    throughput_tps: Estimate | None = None  # Σ tokens / cell wall time (over repeats)
    latency_s: Estimate | None = None
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p99_s: float | None = None
    ttft_s: Estimate | None = None
    tpot_s: Estimate | None = None  # Σ (latency − TTFT) / Σ (output tokens − 1)
    step_time_s: Estimate | None = None  # Σ (latency − TTFT) / Σ verification steps (decoding steps)
    verification: VerificationSpent | None = None
    # Under the suite's SLOs (``slo:``): requests meeting every one per second of the cells' wall time, and
    # their share of the requests sent (specbench.analysis.goodput). Written only when computed.
    goodput: Estimate | None = None
    goodput_share: Estimate | None = None
    speedup: Estimate | None = None
    # τ, tokens per step and speedup without the requests whose output is degenerate (a repetition loop);
    # their share is the catalogue's ``degenerate_share`` in ``metrics``. Written only when computed.
    non_degenerate: NonDegenerate | None = None
    # Against the baseline group of the same target/dataset/temperature/load.
    greedy_match: Estimate | None = None
    equivalence: Equivalence | None = None
    accuracy: dict[str, Estimate] = Field(default_factory=dict)
    accuracy_delta: dict[str, Estimate] = Field(default_factory=dict)
    scoring_note: str | None = None
    # Published values for this group, keyed by the measured metric each is compared with.
    reference: dict[str, ReferenceValue] | None = None
    # A later conversation turn (or a group of conversations): how many turn-1 replies matched the baseline's.
    turn1_identical: TurnOneIdentity | None = None
    # The catalogue's metrics computed from their declaration (MetricSpec.compute), by name; written only
    # when there are any.
    metrics: dict[str, Estimate] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_stored(cls, data: Any) -> Any:
        """Stored summaries keep ``turn1_identical`` under the group's ``extra`` (an older, untyped slot)."""
        if isinstance(data, dict) and "extra" in data:
            data = dict(data)
            extra = data.pop("extra") or {}
            if "turn1_identical" in extra and "turn1_identical" not in data:
                data["turn1_identical"] = extra["turn1_identical"]
        return data

    @model_serializer(mode="wrap")
    def _no_empty_slice(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A group without slice is written as before the slice keys existed (no ``slice`` key)."""
        data = handler(self)
        if self.slice is None or self.slice.empty:
            data.pop("slice", None)
        if not self.metrics:
            data.pop("metrics", None)
        if self.non_degenerate is None:
            data.pop("non_degenerate", None)
        for key in ("goodput", "goodput_share"):
            if data.get(key, 0) is None:
                del data[key]
        t1 = data.pop("turn1_identical", None)
        data["extra"] = {"turn1_identical": t1} if t1 is not None else {}  # the stored shape, as before
        return data

    def held(self, metric: str | metric_catalog.MetricSpec) -> Any:
        """The group's value of a catalogue metric (an Estimate, a list or dict of them, a number; None
        when absent), wherever the summary holds it."""
        m = metric_catalog.spec(metric) if isinstance(metric, str) else metric
        return None if m is None else metric_catalog.held(self, m)

    @property
    def baseline_key(self) -> BaselineKey:
        """Groups compared with each other (speedup, greedy identity): same target, dataset, T, load and slice."""
        return baseline_key(self.target, self.dataset, self.temperature, self.batch_size, self.request_rate,
                            self.slice.id if self.slice else "")


def is_workload_slice(g: GroupSummary) -> bool:
    """A category or turn slice of a group (derived from its records; the group itself is listed too)."""
    return g.slice is not None and (g.slice.category is not None or g.slice.turn is not None)


def reference_applies(ref: Mapping[str, Any], *, target: str, methods: Iterable[str | None], dataset: str,
                      temperature: float, k: int | None) -> bool:
    """Whether a published value (a suite's ``references:`` entry) belongs to a group or headline row: same
    target, one of ``methods`` (a group's method or its sweep's label), and the dataset, temperature and K
    wherever the reference gives them."""
    return (ref.get("target") == target and ref.get("method") in tuple(methods)
            and ref.get("dataset") in (None, dataset) and ref.get("temperature") in (None, temperature)
            and ref.get("k") in (None, k))


def is_ratio_reference(ref: Mapping[str, Any]) -> bool:
    """A published ratio against the reference method (the headline's), not a group's own metric."""
    m = metric_catalog.spec(str(ref.get("metric", "tau")))
    return m is not None and m.source == "headline"


class RunSummary(BaseModel):
    """``summary.json`` (see :mod:`specbench.results.migrations` for versions; load stored ones with :meth:`load`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    schema_version: int = SUMMARY_SCHEMA_VERSION
    run_id: str
    suite_name: str
    groups: list[GroupSummary]
    checks: list[CounterCheck] = Field(default_factory=list)
    headline: list[HeadlineRow] = Field(default_factory=list)  # methods vs the reference method (compare_to)
    k_sweeps: list[KSweep] = Field(default_factory=list)
    extra: SummaryExtra = Field(default_factory=SummaryExtra)

    @classmethod
    def load(cls, data: dict[str, Any]) -> RunSummary:
        """A stored summary of any schema version."""
        return cls.model_validate(upgrade_summary(data))

    @property
    def whole_groups(self) -> list[GroupSummary]:
        """The groups without their category and turn slices (what the report's group tables list)."""
        return [g for g in self.groups if not is_workload_slice(g)]

    def group(self, group_id: str) -> GroupSummary | None:
        return next((g for g in self.groups if g.group_id == group_id), None)

    def rests_on_loops(self, *group_ids: str | None) -> bool:
        """Whether a number resting on these groups (an arm of a ratio each) is marked: one of them has more
        than a fifth of its requests degenerate (:func:`specbench.results.degeneracy.rests_on_loops`)."""
        return degeneracy.rests_on_loops(self.group(i) for i in group_ids if i)

    def find(self, target: str | None = None, method: str | None = None, dataset: str | None = None) -> list[GroupSummary]:
        return [
            g
            for g in self.groups
            if (target is None or g.target == target)
            and (method is None or g.method == method)
            and (dataset is None or g.dataset == dataset)
        ]
