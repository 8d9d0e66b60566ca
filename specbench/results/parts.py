"""Typed parts of ``summary.json`` for the method-vs-method comparison (issue 17).

* :class:`VerificationSpent`: per group, what the target verified and what it kept;
* :class:`KSweep`: per (target, method, dataset, temperature, load), the method at
  each K it ran: τ, speedup, TPOT, time per decoding step, the best K and the
  slope of step time over K;
* :class:`HeadlineRow`: per (target, dataset, temperature, load) and method, the
  τ and speedup ratios against the target's reference method (``compare_to``,
  default its EAGLE-3), paired by prompt, with a verdict.

Every number is an :class:`~specbench.stats.Estimate` (value, 95% interval, n)
recomputed from the raw records by :mod:`specbench.analysis.method_comparison`.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from specbench.results.goodput_curve import GoodputSummary
from specbench.results.k_length_cell import KLengthCell
from specbench.results.noise_calibration import NoiseCalibration
from specbench.results.output_acceptance import OutputAcceptance
from specbench.results.step_share import StepShare
from specbench.stats import Estimate

#: A headline row's verdict. In a run with speed rounds three-way with a margin, as an A/B (faster / slower /
#: same / undecided, :data:`specbench.analysis.method_comparison.HEADLINE_MARGIN`); in a run of one round
#: whether the interval holds 1 (faster / slower / not distinguishable: the two arms measured minutes apart).
Verdict = Literal["faster", "slower", "same", "undecided", "not distinguishable", "no data"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VerificationSpent(_Model):
    """Verification work per group, from the spec-decode counters.

    ``drafted_per_step``: draft tokens sent to the target per verification step;
    ``accepted_per_verified``: accepted / draft tokens verified;
    ``wasted_per_emitted``: (draft tokens − accepted) per output token.
    """

    drafted_per_step: Estimate
    accepted_per_verified: Estimate
    wasted_per_emitted: Estimate


class NonDegenerate(_Model):
    """A group's τ, tokens per step and speedup on its requests whose output is not degenerate
    (:mod:`specbench.results.degeneracy`), beside the pooled ones; each Estimate's n counts those
    requests (the speedup's: prompts where neither arm's output is degenerate). None where it cannot
    be computed (τ without per-request counters, tokens per step without step traces, a speedup
    without a baseline)."""

    tau: Estimate | None = None
    tokens_per_step: Estimate | None = None
    speedup: Estimate | None = None


class KPoint(_Model):
    """One K of a method at one load."""

    k: int
    group_id: str
    n: int
    tau: Estimate | None = None
    speedup: Estimate | None = None
    output_tps: Estimate | None = None
    tpot_s: Estimate | None = None
    step_time_s: Estimate | None = None


class KSweep(_Model):
    """A method across K at one (target, dataset, temperature, load)."""

    target: str
    method: str  # the suite's label (family of the '<name>-k<K>' groups)
    method_kind: str
    dataset: str
    temperature: float
    batch_size: int
    request_rate: float | None = None
    points: list[KPoint]
    best_k: Estimate = Field(description="K with the highest per-stream output tok/s; interval: bootstrap over prompts")
    step_time_slope_s: Estimate = Field(
        description="least-squares slope of time per decoding step over K (s per extra draft token); "
        "bootstrap over prompts measured at every K"
    )
    best_k_wins: Estimate | None = Field(
        None, description="speed rounds: share of rounds in which the best K had the highest output tok/s "
        "(Wilson; n: rounds); None without rounds")


class PublishedClaim(_Model):
    metric: str
    value: float
    high: float | None = None
    source: str


class HeadlineRow(_Model):
    """A method against the target's reference method at one (dataset, temperature, load).

    Each arm is taken at its best K at that load (the K with the highest
    per-stream output tok/s); ``speedup_ratio`` is (Σ tokens / Σ latency) of
    the method over the reference's on the prompts both measured: in a run with
    speed rounds the geometric mean of the per-round ratios with the A/B rule's
    confidence sequence, else the pooled ratio bootstrapped over prompts; ``tau_ratio`` is the ratio of the two pooled τ over the
    same prompts, from the per-request counters.
    """

    target: str
    dataset: str
    temperature: float
    batch_size: int
    request_rate: float | None = None
    method: str
    method_kind: str
    method_group: str
    method_k: int | None
    reference: str
    reference_group: str
    reference_k: int | None
    n_prompts: int
    tau_ratio: Estimate
    speedup_ratio: Estimate
    method_speedup: Estimate | None = None  # over no speculation, as in the results table
    reference_speedup: Estimate | None = None
    verdict: Verdict
    rounds: int | None = None  # the speed rounds the verdict rests on (None: a run of one round)
    #: an undecided row: the units (rounds, or instances when ``instances`` > 1) at which the rule would decide
    #: if the ratio and spread held (None: no number would, or the row is decided)
    rounds_to_decide: int | None = None
    #: engine instances per arm the rounds ran on (issue 51); > 1: the rule's unit is an instance's block of
    #: rounds (analysis.headline_rounds), 1: the round (that one instance's offset is not in the interval)
    instances: int | None = None
    #: speed rounds left out of the rule's units because a request in their instance stalled (analysis.headline_rounds)
    stalled_rounds: int = 0
    #: the Ks the paired rule could not split from the fastest K (the row compares the cheapest of them)
    method_k_tie: list[int] = Field(default_factory=list)
    reference_k_tie: list[int] = Field(default_factory=list)
    published: list[PublishedClaim] = Field(default_factory=list)

    @property
    def tau_only(self) -> bool:
        """A τ-only row: τ was compared but no prompt was timed in both arms (the reference simulator,
        ``engine: reference``, measures τ and never speed), so its "no data" verdict is not a failure."""
        return self.speedup_ratio.value is None and self.speedup_ratio.n == 0 and self.tau_ratio.value is not None


# ---------------------------------------------------------------------------
# serving: one cell's latency and throughput, speedup at one load

class Dist(BaseModel):
    """Mean and percentiles of one latency quantity (seconds)."""

    model_config = ConfigDict(extra="forbid")

    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class ServingSummary(BaseModel):
    """One cell's serving numbers."""

    model_config = ConfigDict(extra="forbid")

    cell_id: str | None = None
    method: str | None = None
    concurrency: int | None = None
    request_rate: float | None = None  # Poisson cells: offered requests/s
    max_concurrency: int | None = None  # Poisson cells: cap on requests in flight
    num_requests: int
    num_ok: int
    errors: dict[str, int]
    wall_time_s: float | None
    ttft: Dist
    tpot: Dist
    itl: Dist
    latency: Dist
    prompt_tokens: int
    output_tokens: int
    output_throughput: float | None  # tokens/s
    total_throughput: float | None
    request_throughput: float | None
    goodput: float | None = None  # requests/s meeting the SLO
    goodput_fraction: float | None = None
    tau_pooled: float | None = None  # from the cell's counters (server /metrics)
    tau_mean_per_request: float | None = None


SpeedupMetric = Literal["tpot", "throughput"]


class Rate(NamedTuple):
    """A request-rate load (Poisson, requests/s) as a group key; a plain ``int`` is a concurrency."""

    req_s: float


Load = int | Rate


class Speedup(BaseModel):
    """Speedup of ``method`` over the baseline at one load (> 1 is faster): a
    ``concurrency`` or, for open-loop cells, a ``request_rate`` (requests/s)."""

    model_config = ConfigDict(extra="forbid")

    method: str
    concurrency: int | None = None
    request_rate: float | None = None
    metric: SpeedupMetric
    estimate: Estimate
    n_method: int
    n_baseline: int

    @property
    def load(self) -> Load:
        return Rate(self.request_rate) if self.request_rate is not None else int(self.concurrency or 0)


# ---------------------------------------------------------------------------
# the summary's typed parts that once were dicts

class Part(BaseModel):
    """A typed part of a stored file (it keeps fields it does not know, so newer files still load)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)


class CounterCheck(Part):
    """One internal-consistency check of a group's counters."""

    group_id: str
    check: str
    ok: bool


class CrossCheckRow(Part):
    """Reference-simulator τ next to vLLM τ for one (method, K, dataset)."""

    method: str
    method_kind: str | None = None
    k: int | None = None
    dataset: str
    vllm_group: str | None = None
    reference_group: str | None = None
    vllm_tau: Estimate
    reference_tau: Estimate
    # Committed tokens per target step of each (specbench.analysis.step_accounting): equal at T=0 when both engines
    # accepted the same drafts; τ can agree while these differ only where the outputs differ.
    vllm_tokens_per_step: Estimate | None = None
    reference_tokens_per_step: Estimate | None = None
    target: str
    flag: bool
    config_mismatch: str | None = None
    note: str = ""


class ServingSpeedupRow(Speedup):
    """A method's speedup over the baseline at one load on a server target."""

    target: str
    dataset: str
    temperature: float | None = None


class ServingComparison(_Model):
    """A server cell against another cell at the same target, dataset, temperature, load and repeat (its
    baseline's, or its reference method's): point ratios, computed by the analysis
    (:func:`specbench.analysis.serving_metrics.compare_cells`) and shown by the report's serving table."""

    cell_id: str  # the other cell
    method: str  # its method
    #: :func:`~specbench.results.speed_estimators.tpot_ratio`: the other cell's pooled TPOT over this one's,
    #: each Σ (latency − TTFT) / Σ (tokens − 1) over the cell's requests (> 1: this one is faster)
    tpot_ratio: float | None = None
    #: :func:`~specbench.results.speed_estimators.throughput_ratio` of aggregate output tok/s (Σ output tokens /
    #: the cell's wall time), this cell's over the other's
    throughput_ratio: float | None = None


class ServingCellRow(ServingSummary):
    """One server cell's latency percentiles and throughput, and its ratios to its baseline's and its reference
    method's cell at the same load (None: no such cell, or this is it; a summary stored before they existed)."""

    kind: Literal["cell"] = "cell"
    target: str
    dataset: str
    temperature: float | None = None
    vs_baseline: ServingComparison | None = None
    vs_reference: ServingComparison | None = None


ServingRow = ServingCellRow | ServingSpeedupRow


class CategoryCell(_Model):
    """One cell of the category matrix: a method·K on one category of a (target, dataset, T, load).

    ``tau`` is the group's category slice's pooled τ; ``tau_ratio`` its τ over the reference
    method's (at the reference's best K there) on the same prompts, from the per-request
    counters, bootstrapped over prompts. ``too_few``: fewer prompts than an interval needs
    (:data:`specbench.analysis.categories.MIN_PROMPTS_FOR_INTERVAL`); the report says so.
    """

    target: str
    dataset: str
    temperature: float
    batch_size: int
    request_rate: float | None = None
    method: str  # the group's method label (method·K)
    method_kind: str
    k: int | None = None
    group_id: str  # the category slice's id
    category: str
    reference_group: str | None = None  # the reference method's slice of this category (its τ ratio's other arm)
    n_prompts: int
    tau: Estimate | None = None
    speedup: Estimate | None = None
    reference: str | None = None
    tau_ratio: Estimate | None = None
    too_few: bool = False


class SummaryExtra(Part):
    #: the serving part: every server cell's row and every method's speedup at each load, in one list (older
    #: shapes are brought to it by :mod:`specbench.results.migrations`); read with the two properties below
    serving: list[ServingCellRow | ServingSpeedupRow] = Field(default_factory=list)
    category_matrix: list[CategoryCell] = Field(default_factory=list)
    cross_check: list[CrossCheckRow] = Field(default_factory=list)
    scoring_notes: list[str] = Field(default_factory=list)
    torn_lines: list[str] = Field(default_factory=list)  # "file:line" of torn last lines analyze dropped
    # "group: metric (n)" of every interval of zero width on fewer than 10 units that is not exact by construction
    zero_width: list[str] = Field(default_factory=list)
    # the A/A calibration whose between-run noise the speed intervals include (issue 22); None: within-run only
    speed_noise: NoiseCalibration | None = None
    speed_noise_note: str | None = None  # why a calibration beside the run was not used
    # goodput under the suite's SLOs (a suite with ``slo:``): each method against no speculation by load
    goodput: GoodputSummary | None = None
    # per speculative group with complete step traces: acceptance by output-position bucket
    acceptance_along_output: list[OutputAcceptance] = Field(default_factory=list)
    # why the headline's speed blocks ended (a suite with ``headline:``): every pair decided, the instances, budget
    headline_blocks: str | None = None
    # per group timed by phase (the step-phase-timing engine patch): the drafter's share of a decoding step
    step_shares: list[StepShare] = Field(default_factory=list)
    # a K sweep at several batch sizes and input lengths: per cell the best K and what a batch-only schedule loses
    k_by_length: list[KLengthCell] = Field(default_factory=list)

    @property
    def serving_cells(self) -> list[ServingCellRow]:
        """The server cells' rows, in the order stored."""
        return [r for r in self.serving if isinstance(r, ServingCellRow)]

    @property
    def serving_speedups(self) -> list[ServingSpeedupRow]:
        """The methods' speedups over the baseline by load, in the order stored."""
        return [r for r in self.serving if isinstance(r, ServingSpeedupRow)]

    @model_serializer(mode="wrap")
    def _without_unset_noise(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Summaries analysed without a calibration, SLOs or step traces are stored as before."""
        data = handler(self)
        return {k: v for k, v in data.items()
                if not (k in ("speed_noise", "speed_noise_note", "goodput", "headline_blocks") and v is None)
                and not (k in ("acceptance_along_output", "step_shares", "k_by_length") and not v)}




# ---------------------------------------------------------------------------
# equivalence: the lossless checks of a group against its baseline


class _AsStored(Part):
    """A part that dumps the keys it was given (and those it kept), so an older, shorter dict
    written back is the dict that was read."""

    @model_serializer(mode="wrap")
    def _as_stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        keep = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in keep}


class Divergence(_AsStored):
    """A method output's first token that differs from the baseline's."""

    prompt_id: str
    sample_index: int = 0
    repeat: int = 0
    position: int | None = None
    kind: str  # divergent | unverifiable | near_tie
    gap: float | None = None  # nats from the baseline's top token to the method's
    gap_is_bound: bool = False  # the method's token was outside the recorded top-k: gap is a lower bound
    baseline_token: int | None = None
    method_token: int | None = None


class EquivalenceTest(_AsStored):
    """One lossless test's result: the verdict ('equivalent', 'not shown equivalent', 'divergent'),
    why, and the baseline group it was checked against."""

    verdict: str
    reason: str | None = None
    baseline_group: str | None = None


class GreedyEquivalence(EquivalenceTest):
    """Greedy outputs token by token against the baseline's (near-ties: flips within the dtype's tolerance)."""

    n: int | None = None
    n_identical: int | None = None
    n_near_tie: int | None = None
    n_divergent: int | None = None
    n_unverifiable: int | None = None
    n_unpaired: int | None = None
    match_rate: float | None = None
    match_ci: list[float] | None = None  # Wilson interval of match_rate
    consistent_rate: float | None = None
    tie_tolerance: float | None = None  # nats
    tolerance_from: str | None = None
    dtypes: list[str] = Field(default_factory=list)
    near_tie_gaps: list[float] = Field(default_factory=list)
    divergent_gaps: list[float] = Field(default_factory=list)
    first_divergences: list[Divergence] = Field(default_factory=list)


class SampledEquivalence(EquivalenceTest):
    """Sampled outputs' PIT values under the plain target (teacher forcing) against uniform and the baseline's."""

    temperature: float | None = None
    n_requests: int | None = None
    n_unscored: int | None = None
    n_tokens: int | None = None
    n_baseline_tokens: int | None = None
    n_baseline_requests: int | None = None
    statistic: float | None = None
    pvalue: float | None = None
    ks_pvalue: float | None = None
    chi2_pvalue: float | None = None
    two_sample_pvalue: float | None = None
    baseline_pvalue: float | None = None
    alpha: float | None = None
    detectable_tv: float | None = None
    min_detectable_tv: float | None = None
    target_tv: float | None = None
    min_tokens: int | None = None
    scorer: str | None = None


class Equivalence(_AsStored):
    """A group's lossless checks: ``greedy`` and/or ``sampled``.

    Older summaries hold other tests by name, or one flat verdict (``{"verdict": …}``); they
    load as they were and :meth:`tests` reads them all."""

    greedy: GreedyEquivalence | None = None
    sampled: SampledEquivalence | None = None

    def tests(self, temperature: float) -> list[tuple[str, EquivalenceTest]]:
        """(test name, result) of every test with a verdict (a flat one is named by its ``test`` or
        ``kind``, else greedy at T=0 and distribution otherwise)."""
        extra = self.model_extra or {}
        if "verdict" in extra:
            name = extra.get("test", extra.get("kind", "greedy" if temperature == 0 else "distribution"))
            return [(str(name), EquivalenceTest.model_validate(extra))]
        out: list[tuple[str, EquivalenceTest]] = [(k, v) for k, v in (("greedy", self.greedy),
                                                                       ("sampled", self.sampled)) if v is not None]
        return out + [(str(k), EquivalenceTest.model_validate(v)) for k, v in extra.items()
                      if isinstance(v, dict) and "verdict" in v]
