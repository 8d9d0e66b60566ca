"""Typed part of ``summary.json`` for acceptance along the output (issue 52): per group, the draft acceptance
rate of the verification steps whose first drafted token falls in each bucket of output positions, from the
requests' step traces (:class:`~specbench.results.records.StepTrace`), computed by
:mod:`specbench.analysis.acceptance_along_output`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from specbench.stats import Estimate


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OutputBucket(_Model):
    """The drafting steps whose first drafted token lies at output positions [start, end) (0-based; the prefill
    emits position 0)."""

    start: int
    end: int
    #: Σ accepted / Σ drafted over those steps, pooled; 95 % bootstrap over requests (Wilson over the draft
    #: tokens when every request accepted all or none of them; its n is then those tokens); n: requests
    rate: Estimate
    steps: int  # drafting steps in the bucket
    requests: int  # requests with at least one of them
    accepted: int
    drafted: int


class OutputAcceptance(_Model):
    """A group's acceptance rate along its outputs, bucket by bucket.

    ``requests``: the successful requests whose trace lists every step (used); ``incomplete``: those whose
    trace does not (only the drafting steps are known, e.g. a server's ngram: where a step falls in the
    output is then unknown), left out. ``trained_tokens``: the zoo's training sequence length when the
    target is the zoo (``model: tiny``), else None; ``past_training_from`` / ``past_training_all``: the
    output position from which the first / every used request's prompt and output together pass it.
    """

    group_id: str
    target: str
    method: str
    method_kind: str
    k: int | None = None
    dataset: str
    temperature: float
    batch_size: int
    request_rate: float | None = None
    bucket_tokens: int
    buckets: list[OutputBucket]
    requests: int
    incomplete: int = 0
    trained_tokens: int | None = None
    past_training_from: int | None = None
    past_training_all: int | None = None
