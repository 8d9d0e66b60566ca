"""The engine protocol: what the runner asks of vLLM offline, vLLM server or
the reference simulator.

An engine is started once per :class:`~specbench.plan.EngineConfig` and runs
every cell that shares that configuration. It emits one
:class:`~specbench.records.RequestRecord` per request through a callback (so
the runner can append it to disk at once) and returns the cell's counter
delta.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from specbench.plan import Cell, EngineConfig
from specbench.records import RequestRecord, SpecCounters


class PreparedPrompt(BaseModel):
    """One dataset item, ready for an engine."""

    model_config = ConfigDict(extra="forbid")

    prompt_id: str
    # Chat messages (engines apply the target's chat template) …
    messages: list[dict[str, str]] | None = None
    # … or a raw completion prompt (no chat template).
    text: str | None = None
    reference: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class SamplingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float
    max_tokens: int
    top_p: float = 1.0
    seed: int = 0
    samples_per_prompt: int = 1
    # Top-k logprobs to record per generated token (None: none).
    logprobs: int | None = None
    stop: list[str] | None = None


def request_seed(sampling: SamplingRequest, prompt_id: str, sample: int, repeat: int) -> int:
    """The per-request sampling seed, shared by every engine so that outputs can match.

    It mixes in the prompt: with ``seed + f(sample, repeat)`` alone, sample
    ``s`` of every prompt drew the same random stream, so prompts with
    similar next-token distributions emitted correlated tokens, which makes
    their PIT values dependent and the sampled-equivalence test
    anti-conservative (false "divergent" verdicts).
    """
    mix = sampling.seed + 7919 * sample + 104729 * repeat + 1_000_003 * zlib.crc32(prompt_id.encode())
    return mix % (2**31 - 1)


class CellRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    cell: Cell
    prompts: list[PreparedPrompt]
    sampling: SamplingRequest
    # Prompt ids (with sample index) already recorded, e.g. on --resume.
    skip: set[tuple[str, int]] = Field(default_factory=set)


class CellOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    counters: SpecCounters | None = None
    wall_time_s: float
    num_requests: int


class EngineUnavailable(Exception):
    """The engine could not start or died.

    ``skipped`` marks a configuration the engine cannot run here by design
    (e.g. DSpark on vLLM CPU): its cells are recorded as skipped with
    ``reason``, not failed.
    """

    def __init__(self, reason: str, *, skipped: bool = False, log_tail: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.skipped = skipped
        self.log_tail = log_tail


class CellFailed(Exception):
    """A cell failed while the engine may still be usable (or not: ``engine_dead``)."""

    def __init__(self, reason: str, *, engine_dead: bool = False, log_tail: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.engine_dead = engine_dead
        self.log_tail = log_tail


EmitRecord = Callable[[RequestRecord], None]


class Engine(Protocol):
    config: EngineConfig

    def start(self) -> None:
        """Start (raises :class:`EngineUnavailable`)."""

    def run_cell(self, request: CellRequest, emit: EmitRecord) -> CellOutcome:
        """Run one cell (raises :class:`CellFailed`)."""

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """The exact configuration, for the manifest and --dry-run."""
