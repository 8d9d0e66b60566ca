"""The raw, versioned record schema: the source of truth for every number.

A run writes two append-only JSONL files:

* ``records.jsonl`` — one :class:`RequestRecord` per request (per prompt,
  sample and repeat of a cell);
* ``cells.jsonl`` — one :class:`CellRecord` per finished cell attempt: its
  status (ok / skipped / failed, with the reason) and the engine's
  spec-decode counter deltas over exactly that cell's requests.

Everything in ``summary.json`` and the reports is derived from these two
files by pure functions (``metrics``, ``equivalence``, ``scoring``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from specbench.config.stop_rule import StopRecord

SCHEMA_VERSION = 1

CellStatus = Literal["ok", "skipped", "failed"]



def now_iso() -> str:
    """A stored time stamp (records' ``started_at``/``finished_at``, the manifest's): UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

class SpecCounters(BaseModel):
    """Speculative-decoding counters (a delta over some set of requests).

    Mirrors vLLM's ``vllm:spec_decode_num_drafts``,
    ``…_num_draft_tokens``, ``…_num_accepted_tokens`` and
    ``…_num_accepted_tokens_per_pos``.
    """

    model_config = ConfigDict(extra="forbid")

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = Field(default_factory=list)

    def _combine(self, other: SpecCounters, sign: int) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        a = self.accepted_per_pos + [0] * (n - len(self.accepted_per_pos))
        b = other.accepted_per_pos + [0] * (n - len(other.accepted_per_pos))
        return SpecCounters(
            num_drafts=self.num_drafts + sign * other.num_drafts,
            num_draft_tokens=self.num_draft_tokens + sign * other.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens + sign * other.num_accepted_tokens,
            accepted_per_pos=[x + sign * y for x, y in zip(a, b, strict=True)],
        )

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return self._combine(other, 1)

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        return self._combine(other, -1)

    @property
    def is_empty(self) -> bool:
        return self.num_drafts == 0 and self.num_draft_tokens == 0


StepSource = Literal["vllm", "vllm+ngram-replay", "reference"]


class StepTrace(BaseModel):
    """A request's verification steps (the target's forward passes after its prefill), in order.

    ``drafted[i]`` / ``accepted[i]``: draft tokens the target verified at step i and how many of
    them it accepted; a step without a draft has ``drafted[i] == 0``. ``complete``: every step is
    listed. It is False when only the steps that drafted are known: vLLM's per-request metrics
    (``detailed``) record only those, which is every step for a method that always drafts, not
    for one that may skip drafting (ngram, suffix) unless the skipped steps were recovered.
    ``source``: ``vllm`` (vLLM's per-step metrics as they are), ``vllm+ngram-replay`` (the steps
    without a draft found by replaying vLLM's own ngram proposer over the request's tokens, checked
    step by step against vLLM's drafted steps), ``reference`` (the simulator's every round).
    :mod:`specbench.analysis.step_accounting` derives tokens per step, the terminal overcount and the draft
    rate from it.
    """

    model_config = ConfigDict(extra="forbid")

    drafted: list[int]
    accepted: list[int]
    complete: bool
    source: StepSource


class TokenLogprobs(BaseModel):
    """Top-k logprobs at one generated position (token id → logprob)."""

    model_config = ConfigDict(extra="forbid")

    top: dict[int, float]


class RequestRecord(BaseModel):
    """One request's raw outcome. Never edited after it is written."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    run_id: str
    cell_id: str
    engine_key: str
    prompt_id: str
    repeat: int = 0
    sample_index: int = 0
    seed: int | None = None
    round: int | None = None  # the speed round it was measured in (a run with rounds > 1), 0-based
    # The engine instance it was measured on (0-based; None: the run starts each engine once) and whether it is
    # a headline speed round's repeat of the suite's prompts (issue 51): such a record counts for the headline's
    # speed only; τ, accuracy, equivalence and every per-prompt figure use the suite's single pass.
    instance: int | None = None
    speed_only: bool = False
    prompt_tokens: int
    output_token_ids: list[int]
    output_text: str
    finish_reason: str | None = None
    # Timings in seconds, measured by the engine (offline: vLLM's request
    # stats; server: the client's clock). ``None`` when unavailable.
    latency_s: float | None = None
    ttft_s: float | None = None
    itl_s: list[float] | None = None
    # Server engine: when the request was sent, in seconds after the cell's
    # measured load started (open-loop cells send on a seeded schedule); in a
    # run with rounds, after the cell's round sent its first batch.
    sent_offset_s: float | None = None
    # Per-request spec-decode counters when the engine can attribute them
    # (offline at batch size 1; server with per-request metrics).
    spec: SpecCounters | None = None
    # Its verification steps in order (speculative cells whose engine records them).
    steps: StepTrace | None = None
    # Top-k logprobs of each generated position when the cell asked for them.
    logprobs: list[dict[int, float]] | None = None
    error: str | None = None
    # Task score (filled when the run scores; see ``scoring``).
    score: dict[str, float | bool | str | None] | None = None
    # Conversations run turn by turn (``turns: all``): the conversation's prompt id, this
    # record's turn (1-based) and how many turns the conversation has (a replayed recorded
    # turn, ``replay: recorded``, carries its turn only). A conversation's
    # records are written together once its last turn finished (the write unit), so a
    # stopped run never leaves a partial one that counts (see analysis.metrics.unique_requests).
    conversation_id: str | None = None
    turn: int | None = None
    conversation_turns: int | None = None

    @model_serializer(mode="wrap")
    def _single_turn_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A record outside a conversation is written as before conversations existed."""
        data = handler(self)
        for key in _CONVERSATION_KEYS:
            if data.get(key, 0) is None:
                del data[key]
        for key, default in _SPEED_ROUND_DEFAULTS.items():  # a run without headline speed rounds: as before
            if key in data and data[key] == default:
                del data[key]
        return data

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)


_CONVERSATION_KEYS = ("conversation_id", "turn", "conversation_turns")
_SPEED_ROUND_DEFAULTS: dict[str, object] = {"instance": None, "speed_only": False}


class StepPhases(BaseModel):
    """A cell's engine steps timed inside vLLM's model runner (the ``step-phase-timing`` engine patch, issue 52):
    per step, in seconds, the target's forward over the scheduled tokens with its input preparation
    (``forward_s``), rejection sampling (``sample_s``), the runner's bookkeeping (``bookkeeping_s``), the
    drafter's proposal (``draft_s``) and the whole step (``step_s``: execute_model + sample_tokens, one timer),
    with the tokens and requests it scheduled, in the order the steps ran; a cell run in rounds holds its rounds' steps one after another."""

    model_config = ConfigDict(extra="forbid")

    forward_s: list[float] = Field(default_factory=list)
    sample_s: list[float] = Field(default_factory=list)
    bookkeeping_s: list[float] = Field(default_factory=list)
    draft_s: list[float] = Field(default_factory=list)
    step_s: list[float] = Field(default_factory=list)
    tokens: list[int] = Field(default_factory=list)  # the tokens the step scheduled (K+1 per request decoding)
    requests: list[int] = Field(default_factory=list)  # the requests it scheduled

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[float]]) -> StepPhases:
        """From the patch's rows (forward, sample, bookkeeping, draft, step, tokens, requests)."""
        cols = list(zip(*rows, strict=True)) if rows else [()] * len(cls.model_fields)
        return cls(**{k: list(c) for k, c in zip(cls.model_fields, cols, strict=True)})

    def __add__(self, other: StepPhases) -> StepPhases:
        return StepPhases(**{k: getattr(self, k) + getattr(other, k) for k in type(self).model_fields})

    @property
    def steps(self) -> int:
        return len(self.step_s)


class CellRecord(BaseModel):
    """One finished attempt at a cell."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    run_id: str
    cell_id: str
    engine_key: str
    status: CellStatus
    reason: str | None = None
    # Spec-decode counter delta over this cell's requests (``None`` for
    # baseline cells and cells that did not run).
    counters: SpecCounters | None = None
    num_requests: int = 0
    wall_time_s: float | None = None
    engine_log_tail: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    # A cell that ran under a stop rule: prompts used of available, why it stopped, its interval.
    stop: StopRecord | None = None
    # A run with speed rounds: the wall time of this cell's batches in each round, by round (their sum is
    # ``wall_time_s``); what a per-round rate (goodput) divides by. None: one go, or stored before it existed.
    round_wall_s: list[float] | None = None
    # An engine with the ``step-phase-timing`` patch: its steps for this cell, timed by phase. None: not timed.
    step_phases: StepPhases | None = None

    @model_serializer(mode="wrap")
    def _without_unset_rounds(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A cell measured in one go (and not timed by phase) is written as before those fields existed."""
        data = handler(self)
        for key in ("round_wall_s", "step_phases"):
            if data.get(key, 0) is None:
                del data[key]
        return data
