"""``kind: spec_bench``: Spec-Bench's 480 questions (packaged, Apache-2.0, with their 13 categories
and the 80 two-turn MT-Bench questions), or a local ``question.jsonl``. The first turn is sent;
``turns: all`` runs each conversation turn by turn. Its summarization and RAG rows are the
contexts of prompts of given lengths (:mod:`specbench.datasets.lengths`)."""

from __future__ import annotations

from typing import Any, ClassVar

from specbench.config.dataset_kinds import SPEC_BENCH, DatasetKind
from specbench.config.suite import DatasetSpec
from specbench.datasets import lengths
from specbench.datasets.base import (
    DatasetError,
    KindModule,
    Row,
    RowError,
    as_prompt,
    field_of,
    formatted,
    messages,
)
from specbench.results.requests import PreparedPrompt

TEMPLATE = "{question}"


def user_turns(row: Row) -> list[str]:
    """A row's user turns: a non-empty list of strings."""
    turns = field_of(row, "turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise RowError(f"'turns' must be a non-empty list of strings, got {str(turns)[:80]!r}")
    return turns


class SpecBench(KindModule):
    kind: ClassVar[DatasetKind] = SPEC_BENCH
    packaged = ("data/spec_bench/question.jsonl.gz", "Apache-2.0 (Spec-Bench); data/spec_bench/LICENSE")

    def prompt(self, spec: DatasetSpec, row: Row, index: int, chat: bool) -> PreparedPrompt:
        pid = f"spec_bench-{field_of(row, 'question_id')}"
        turns = user_turns(row)
        template = spec.prompt_template or TEMPLATE
        meta = {"category": row.data.get("category")}
        if spec.turns == "all":
            if not chat:
                raise DatasetError(f"{spec.name}: turns: all needs a target with a chat template")
            return PreparedPrompt(prompt_id=pid, messages=messages(spec, formatted(template, question=turns[0])),
                                  meta=meta, later_turns=[formatted(template, question=t) for t in turns[1:]])
        return as_prompt(spec, chat, pid, formatted(template, question=turns[0]), None, meta)

    def length_contexts(self, rows: list[dict[str, Any]]) -> list[lengths.Context]:
        return lengths.spec_bench_contexts(rows)


MODULE = SpecBench()
