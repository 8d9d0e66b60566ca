"""The drafter's share of a speculative step, as stored in ``summary.json`` (issue 52; computed by
:mod:`specbench.analysis.step_phases`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from specbench.stats import Estimate


class StepShare(BaseModel):
    """One group's decoding steps timed by phase inside vLLM's model runner (the ``step-phase-timing`` engine
    patch): per decoding step, in milliseconds, each phase's mean with a bootstrap interval over the steps.

    ``verification_ms``: the target's forward over the scheduled tokens (K+1 per request) with its input
    preparation, rejection sampling and the runner's bookkeeping, each timed; ``draft_ms``: the drafter's
    proposal, timed; ``step_ms``: execute_model + sample_tokens under one timer; ``untimed_ms``: the step less
    the timed phases (glue no timer covers), per step. ``draft_share``: Σ draft / Σ step. ``engine_step_ms``:
    the engine's step as the requests saw it (Σ (latency − TTFT) / Σ decoding steps), which adds the engine
    core's scheduling and output handling to the runner's step. Memory: ``draft_weights_mib``, the drafter
    checkpoint's weight files; ``kv_cache_tokens``, the tokens the engine's KV cache holds, and
    ``kv_tokens_lost``, the share of the same target's no-speculation engine's tokens it lost (the drafter's
    layers take KV cache from the same allocation)."""

    model_config = ConfigDict(extra="forbid")

    group_id: str
    target: str
    dataset: str
    temperature: float
    method: str
    k: int | None
    batch_size: int
    steps: int  # decoding steps timed (a step that scheduled a prompt's prefill is left out)
    prefill_steps: int  # steps left out
    forward_ms: Estimate
    sample_ms: Estimate
    bookkeeping_ms: Estimate
    verification_ms: Estimate
    draft_ms: Estimate
    step_ms: Estimate
    untimed_ms: Estimate
    draft_share: Estimate
    engine_step_ms: Estimate | None = None
    draft_weights_mib: float | None = None
    kv_cache_tokens: int | None = None
    kv_tokens_lost: float | None = None
