"""Chat-templated training text for the zoo's target: questions and answers as the CPU suites send them.

The suites send a GSM8k question inside GSM8k's instruction (``GSM8K_TEMPLATE``), Spec-Bench turns
as chat messages (cpu-workloads wraps each in ``CODE_STUB_TEMPLATE``) and HumanEval prompts raw. A
target that saw only Python answers the first two with newlines. Three sources, all shipped with
Python or generated, none a suite's prompt (tests/unit/test_zoo_corpus_split.py checks it by
n-gram overlap):

* ``math``: :mod:`specbench.zoo.word_problems`' generated problems, in GSM8k's instruction,
  answered step by step ending ``#### <n>``;
* ``code``: functions of the standard library's split (``train`` or ``heldout``) that have a
  docstring: the docstring's first paragraph as the user message (in the stub template, or plain),
  the function's source as the answer;
* ``prose``: the Python reference manual's topics (``pydoc_data.topics``, shipped with Python),
  split into sections: a question naming the topic, a section as the answer.

Each conversation is ChatML (``<|im_start|>role\\n…<|im_end|>\\n``, the zoo's chat template) with
one to three user/assistant turns; conversations are joined without an end-of-text token, so that
after a reply the target goes on writing (a new turn) rather than stopping early.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import random
import textwrap
from collections.abc import Callable

from specbench.zoo.data import is_heldout, read_text, stdlib_files
from specbench.zoo.word_problems import word_problem

#: The instruction specbench.datasets.gsm8k wraps a question in (a test keeps the two equal).
GSM8K_TEMPLATE = "Solve the problem step by step. End with '#### <answer>'.\n\n{question}"
#: cpu-workloads' Spec-Bench ``prompt_template`` (a test keeps the two equal).
CODE_STUB_TEMPLATE = 'def answer():\n    """{question}"""\n'

SOURCES = ("math", "code", "prose")

_QUESTIONS = [
    "Explain {topic} in Python.",
    "What should I know about {topic}?",
    "Describe how {topic} works.",
    "Write a short guide to {topic}.",
    "Give an overview of {topic}, with details.",
]


def turn(role: str, content: str) -> str:
    return f"<|im_start|>{role}\n{content}<|im_end|>\n"


def chatml_text(pairs: list[tuple[str, str]]) -> str:
    return "".join(turn("user", q) + turn("assistant", a) for q, a in pairs)


# --------------------------------------------------------------------------
# sources: each yields (question, answer) pairs


def math_pairs(rng: random.Random) -> Callable[[], tuple[str, str]]:
    def draw() -> tuple[str, str]:
        q, a = word_problem(rng)
        return GSM8K_TEMPLATE.format(question=q), a

    return draw


@functools.lru_cache(maxsize=4)
def documented_functions(split: str) -> tuple[tuple[str, str], ...]:
    """``(docstring summary, function source)`` of every short documented function of ``split``."""
    out = []
    for f in stdlib_files(split):
        text = read_text(f)
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.splitlines(keepends=True)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            doc = ast.get_docstring(node)
            if not doc or node.end_lineno is None or not 3 <= node.end_lineno - node.lineno <= 40:
                continue
            src = "".join(lines[node.lineno - 1 : node.end_lineno]).rstrip()
            summary = doc.split("\n\n")[0].strip()
            if len(summary) >= 20:
                out.append((summary, textwrap.dedent(src)))
    return tuple(out)


def code_pairs(rng: random.Random, split: str) -> Callable[[], tuple[str, str]]:
    funcs = documented_functions(split)

    def draw() -> tuple[str, str]:
        summary, src = rng.choice(funcs)
        q = CODE_STUB_TEMPLATE.format(question=summary) if rng.random() < 0.5 else summary
        return q, src

    return draw


@functools.lru_cache(maxsize=4)
def manual_sections(split: str) -> tuple[tuple[str, str], ...]:
    """``(topic, section text)`` of the reference manual's topics of ``split`` (hashed by topic name)."""
    from pydoc_data.topics import topics

    out = []
    for name in sorted(topics):
        if is_heldout(f"pydoc_data/topics/{name}") != (split == "heldout"):
            continue
        body = topics[name]
        title = body.split("\n", 1)[0].strip() or name
        paras = [p.strip("\n") for p in body.split("\n\n") if p.strip()]
        chunk: list[str] = []
        for p in paras[1:]:  # the first paragraph is the title and its underline
            chunk.append(p)
            if sum(map(len, chunk)) > 600:
                out.append((title, "\n\n".join(chunk)))
                chunk = []
        if chunk:
            out.append((title, "\n\n".join(chunk)))
    return tuple(out)


def prose_pairs(rng: random.Random, split: str) -> Callable[[], tuple[str, str]]:
    sections = manual_sections(split)

    def draw() -> tuple[str, str]:
        title, text = rng.choice(sections)
        topic = title.replace('"', "").strip().lower()
        return rng.choice(_QUESTIONS).format(topic=topic), text

    return draw


def chat_texts(source: str, *, split: str, n: int, seed: int) -> list[str]:
    """``n`` conversations of ``source`` (one to three turns each), deterministic from ``seed``."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    salt = int(hashlib.sha1(f"{source}:{split}".encode()).hexdigest()[:8], 16)
    rng = random.Random(seed * 1_000_003 + salt)
    draw = {"math": lambda: math_pairs(rng), "code": lambda: code_pairs(rng, split),
            "prose": lambda: prose_pairs(rng, split)}[source]()
    return [chatml_text([draw() for _ in range(rng.randint(1, 3))]) for _ in range(n)]
