"""Typed parts of ``summary.json`` for the method-vs-method comparison (issue 17).

* :class:`VerificationSpent`: per group, what the target verified and what it kept;
* :class:`KSweep`: per (target, method, dataset, temperature, load), the method at
  each K it ran: τ, speedup, TPOT, time per decoding step, the best K and the
  slope of step time over K;
* :class:`HeadlineRow`: per (target, dataset, temperature, load) and method, the
  τ and speedup ratios against the target's reference method (``compare_to``,
  default its EAGLE-3), paired by prompt, with a verdict.

Every number is an :class:`~specbench.stats.Estimate` (value, 95% interval, n)
recomputed from the raw records by :mod:`specbench.comparison`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specbench.stats import Estimate

Verdict = Literal["faster", "slower", "not distinguishable", "no data"]


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


class PublishedClaim(_Model):
    metric: str
    value: float
    high: float | None = None
    source: str


class HeadlineRow(_Model):
    """A method against the target's reference method at one (dataset, temperature, load).

    Each arm is taken at its best K at that load (the K with the highest
    per-stream output tok/s); ``speedup_ratio`` is (Σ tokens / Σ latency) of
    the method over the reference's on the prompts both measured, bootstrapped
    over those prompts; ``tau_ratio`` is the ratio of the two pooled τ over the
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
    published: list[PublishedClaim] = Field(default_factory=list)
