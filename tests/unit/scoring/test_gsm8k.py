"""GSM8k answer extraction and scoring."""

from __future__ import annotations

import pytest

from specbench.datasets import packaged_file, read_jsonl
from specbench.scoring.gsm8k import (
    extract_answer,
    extract_last_number,
    extract_strict,
    normalize_number,
    reference_answer,
    score_gsm8k,
)


@pytest.fixture(scope="module")
def gsm8k_rows():
    """The whole GSM8k test split, as the package ships it (no skip: it is part of the install)."""
    return read_jsonl(packaged_file("gsm8k"))


def test_references_score_themselves(gsm8k_rows):
    assert len(gsm8k_rows) == 1319
    strict = flexible = 0
    for row in gsm8k_rows:
        s = score_gsm8k(row["answer"], row["answer"])
        strict += s["strict"]
        flexible += s["flexible"]
        assert s["extracted"] == reference_answer(row["answer"])
    assert (strict, flexible) == (1319, 1319)


def test_known_wrong_answers_score_zero(gsm8k_rows):
    hits = 0
    for row in gsm8k_rows:
        ref = reference_answer(row["answer"])
        wrong = str(int(ref) + 1)
        body = row["answer"].rsplit("####", 1)[0]
        for completion in (body + "#### " + wrong, f"The answer is {wrong}.", wrong):
            s = score_gsm8k(completion, row["answer"])
            hits += s["strict"] + s["flexible"]
    assert hits == 0


def test_reference_answer_parses_commas_and_rejects_missing_marker():
    assert reference_answer("blah\n#### 1,450,000") == "1450000"
    assert reference_answer("#### -3") == "-3"
    with pytest.raises(ValueError):
        reference_answer("no marker here 42")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", "42"),
        ("42.0", "42"),
        ("42.50", "42.5"),
        ("$1,000", "1000"),
        ("$ 1,000.00", "1000"),
        ("-7", "-7"),
        ("−7", "-7"),
        ("18 dollars.", "18"),
        ("$.5", "0.5"),
        ("12%", "12"),
        ("none", None),
    ],
)
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


@pytest.mark.parametrize(
    ("completion", "strict", "flexible"),
    [
        ("She makes 9 * 2 = $18 every day.\n#### 18", "18", "18"),
        ("#### $1,234.", "1234", "1234"),
        ("The answer is 18.", "18", "18"),
        ("So the final answer is: **18**", "18", "18"),
        ("Answer: $18", "18", "18"),
        ("We get \\boxed{18}.", None, "18"),
        ("\\boxed{\\$18\\text{ dollars}} and then 7 more words", None, "18"),
        ("She has 3 apples, then 5, so 18 in total", None, "18"),
        ("The answer is 18. Question 2 asks something else.", "18", "18"),
        ("x = 10 - 3 = 7", None, "7"),
        ("it drops to -5 degrees", None, "-5"),
        ("the ratio is 0.25.", None, "0.25"),
        ("#### 5\n#### 6", "6", "6"),
        ("no digits at all", None, None),
        ("", None, None),
    ],
)
def test_extraction(completion, strict, flexible):
    assert extract_strict(completion) == strict
    assert extract_answer(completion) == flexible


def test_last_number_is_plain_last_number():
    assert extract_last_number("The answer is 18. Question 2 asks") == "2"
    assert extract_last_number("1,2,3") == "3"
    assert extract_last_number("5-3") == "3"


def test_score_strict_vs_flexible():
    assert score_gsm8k("so it is 42", "#### 42") == {"strict": False, "flexible": True, "extracted": "42"}
    assert score_gsm8k("#### 42.0", "42") == {"strict": True, "flexible": True, "extracted": "42"}
    assert score_gsm8k("#### 41", "#### 42")["flexible"] is False
    assert score_gsm8k("nothing", "42") == {"strict": False, "flexible": False, "extracted": None}


def test_score_rejects_reference_without_number():
    with pytest.raises(ValueError):
        score_gsm8k("42", "no number")
