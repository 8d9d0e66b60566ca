"""What an engine is asked to run: prepared prompts, sampling, a cell's request
and its outcome. Plain data, below the engines and the datasets that build them."""

from __future__ import annotations

import zlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, SerializerFunctionWrapHandler, model_serializer

from specbench.config.plan import Cell
from specbench.results.records import SpecCounters, StepPhases


class PreparedPrompt(BaseModel):
    """One dataset item, ready for an engine."""

    model_config = ConfigDict(extra="forbid")

    prompt_id: str
    # Chat messages (engines apply the target's chat template) …
    messages: list[dict[str, str]] | None = None
    # … or a raw completion prompt (no chat template).
    text: str | None = None
    reference: str | None = None
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    # A conversation run turn by turn (``turns: all``): the user messages of its turns after
    # the first (``[]``: a one-turn conversation); None: a single request.
    later_turns: list[str] | None = None
    # A request that replays one turn of a recorded conversation (``replay: recorded``): its
    # 1-based turn and the recorded reply's length in target tokens (its max_tokens).
    turn: int | None = None
    max_tokens: int | None = None


class StoredPrompt(PreparedPrompt):
    """One line of ``prompts.jsonl``: a prompt of the run with its dataset (written once the datasets are
    loaded; read by the analysis for references and categories, and by teacher forcing)."""

    model_config = ConfigDict(extra="allow")

    dataset: str


def is_conversations(prompts: list[PreparedPrompt]) -> bool:
    """Prompts that are conversations to run turn by turn (``later_turns`` set)."""
    return any(p.later_turns is not None for p in prompts)


def conversations_problem(sampling: SamplingRequest, prompts: list[PreparedPrompt]) -> str | None:
    """Why these conversations cannot run turn by turn (every engine's cell fails with it), or None."""
    if sampling.samples_per_prompt != 1:
        return "conversations run one sample per prompt (samples_per_prompt: 1)"
    if any(p.messages is None for p in prompts):
        return "conversations need chat messages (a target with a chat template)"
    return None


def turn_prompt_id(conversation_id: str, turn: int) -> str:
    """A conversation's turn as a request: turn 1 keeps the conversation's prompt id; later turns are ``<id>.turn<t>``."""
    return conversation_id if turn == 1 else f"{conversation_id}.turn{turn}"


def turn_messages(first: list[dict[str, str]], later_turns: list[str], replies: list[str]) -> list[dict[str, str]]:
    """The chat history turn ``len(replies) + 1`` of a conversation is sent with: the first turn's messages,
    then each earlier reply of the engine and the next user turn."""
    out = list(first)
    for reply, user in zip(replies, later_turns, strict=False):
        out += [{"role": "assistant", "content": reply}, {"role": "user", "content": user}]
    return out


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
    round_wall_s: list[float] | None = None  # speed rounds: the wall of the cell's batches in each round
    step_phases: StepPhases | None = None  # the engine's steps timed by phase (the step-phase-timing patch)


# ---------------------------------------------------------------------------
# teacher forcing: what a scoring engine is asked, what it answers, what is stored


class ScoreKey(BaseModel):
    """Which generated sequence an item scores (the leading keys of its ``equivalence.jsonl`` row)."""

    model_config = ConfigDict(extra="forbid")

    cell_id: str
    prompt_id: str
    sample_index: int
    repeat: int
    temperature: float
    top_p: float


class ScoreItem(BaseModel):
    """One sequence to teacher-force: its prompt (``text`` or chat ``messages``; neither
    when the prompt was not found), the prompt's token count in the run and the generated ids."""

    model_config = ConfigDict(extra="forbid")

    key: ScoreKey
    text: str | None = None
    messages: list[dict[str, str]] | None = None
    prompt_tokens: int | None = None
    output_token_ids: list[int]
    temperature: float
    top_p: float = 1.0


class ScoreResult(BaseModel):
    """An engine's answer for one :class:`ScoreItem`: per generated token ``F(x-)`` and
    ``p(x)`` under the processed full-vocabulary distribution, or why it could not score it."""

    model_config = ConfigDict(extra="forbid")

    f_minus: list[float] | None = None
    p: list[float] | None = None
    error: str | None = None


class ScoreRow(BaseModel):
    """One row of ``equivalence.jsonl``: a scored item (its key, ``order``, ``scorer`` and
    ``f_minus``/``p`` or ``error``), or ``{"target", "error"}`` for work that never reached
    an engine. Dumped with only the fields that were set, so a row keeps its stored shape
    when it crosses a process boundary (a Ray worker's events) and comes back."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = None
    cell_id: str | None = None
    prompt_id: str | None = None
    sample_index: int | None = None
    repeat: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    order: str | None = None
    scorer: str | None = None
    error: str | None = None
    f_minus: list[float] | None = None
    p: list[float] | None = None

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}

    def stored(self) -> dict[str, Any]:
        """The row as ``equivalence.jsonl`` holds it (the keys that were set, in field order)."""
        return self.model_dump(mode="json")

    @property
    def request_key(self) -> tuple[str, str, int] | None:
        """(cell, prompt, sample) of the request the row scores (a row without ``sample_index`` is sample 0);
        None for a target's error row."""
        if self.cell_id is None:
            return None
        return self.cell_id, str(self.prompt_id), self.sample_index or 0

    @property
    def scored(self) -> bool:
        """Whether the row holds a request's scores (``f_minus`` and ``p``, no error)."""
        return self.f_minus is not None and self.p is not None and not self.error
