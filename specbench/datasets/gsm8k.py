"""``kind: gsm8k``: grade-school math; the packaged test split (MIT), the hub (``openai/gsm8k``) or a
local jsonl of ``question``/``answer`` rows. Scored by its final number (:mod:`specbench.scoring.gsm8k`)."""

from __future__ import annotations

from typing import ClassVar

from specbench.config.dataset_kinds import GSM8K, DatasetKind
from specbench.config.suite import DatasetSpec
from specbench.datasets.base import KindModule, Row, as_prompt, formatted
from specbench.results.requests import PreparedPrompt

TEMPLATE = "Solve the problem step by step. End with '#### <answer>'.\n\n{question}"


class Gsm8k(KindModule):
    kind: ClassVar[DatasetKind] = GSM8K
    packaged = ("data/gsm8k/test.jsonl.gz", "MIT (c) 2021 OpenAI; data/gsm8k/LICENSE")
    hub_config = "main"

    def prompt(self, spec: DatasetSpec, row: Row, index: int, chat: bool) -> PreparedPrompt:
        content = formatted(spec.prompt_template or TEMPLATE, **row.data)
        return as_prompt(spec, chat, f"gsm8k-{index}", content, row.data.get("answer"), {"category": "math"})


MODULE = Gsm8k()
