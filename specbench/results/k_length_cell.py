"""K by batch size and input length, as stored in ``summary.json`` (issue 52; computed by
:mod:`specbench.analysis.k_by_length`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from specbench.stats import Estimate


class KLengthCell(BaseModel):
    """One (method, batch size, input length) of a K sweep: the K that decodes fastest here, chosen by the
    headline's paired rule (``best_k``: the cheapest K of those the rule does not find slower than the fastest;
    ``best_tie``: those Ks), the K a batch-size-only schedule gives this batch size (``batch_k``: the same
    choice over every length's requests pooled), and what that schedule gives up here: ``speed_ratio``, the
    decode speed (1 / TPOT) at ``batch_k`` over that at ``best_k`` at this length, with the rule's interval
    over the paired speed units (rounds, or engine instances), and its ``verdict`` (*same K*: the schedule
    picks the best K here; else *slower* / *same* / *faster* / *undecided* by the headline's rule)."""

    model_config = ConfigDict(extra="forbid")

    target: str
    dataset: str
    temperature: float
    method: str
    batch_size: int
    input_tokens: int
    ks: list[int]
    best_k: int
    best_tie: list[int] = Field(default_factory=list)
    batch_k: int
    speed_ratio: Estimate
    verdict: str
    rounds: int | None = None  # the speed rounds the ratio rests on (None: the same K, nothing to compare)
    instances: int | None = None
