"""``kind: jsonl``: a local file of one object per line, the prompt in ``prompt_field`` (or built
by ``prompt_template`` from the row), an optional ``reference_field`` and ``category_field``."""

from __future__ import annotations

from typing import ClassVar

from specbench.config.dataset_kinds import JSONL, DatasetKind
from specbench.config.suite import DatasetSpec
from specbench.datasets.base import KindModule, Row, as_prompt, category_name, field_of, formatted
from specbench.results.requests import PreparedPrompt


class Jsonl(KindModule):
    kind: ClassVar[DatasetKind] = JSONL

    def prompt(self, spec: DatasetSpec, row: Row, index: int, chat: bool) -> PreparedPrompt:
        raw = field_of(row, spec.prompt_field)
        content = formatted(spec.prompt_template, **row.data) if spec.prompt_template else str(raw)
        ref = row.data.get(spec.reference_field) if spec.reference_field else None
        meta = {}
        if spec.category_field:
            meta["category"] = category_name(row.data.get(spec.category_field), repr(spec.category_field))
        return as_prompt(spec, chat, str(row.data.get("id", f"{spec.name}-{index}")), content, ref, meta)


MODULE = Jsonl()
