"""GSM8k answer extraction and scoring (pure).

Two scores per completion, after lm-eval-harness's ``gsm8k`` filters:

``strict``
    Only an explicit final-answer convention counts: the dataset's
    ``#### N`` line, or "The answer is N" (the few-shot chain-of-thought
    format). The last such occurrence wins.
``flexible``
    Any final number: ``#### N``, then ``\\boxed{N}``, then "the answer is N",
    then -- as a fallback -- the last number in the text. (lm-eval's
    ``flexible-extract`` always takes the last number; preferring an explicit
    marker first only differs when a completion keeps talking after its
    answer, and is what ``extracted`` reports.)

Numbers are compared as exact decimals after dropping ``$``, thousands
separators, units and trailing periods, so ``$1,000.00`` == ``1000`` and
``42.0`` == ``42``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number: optional sign (not a hyphen between two words/digits), optional
# currency sign, digits with optional well-formed thousands separators,
# optional decimals. "1,2,3" reads as three numbers, "5-3" as 5 and 3.
_NUM = r"(?:(?<![\w.\-−])[-−])?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?:(?<![\w.\-−])[-−])?\$?\.\d+"
_NUM_RE = re.compile(_NUM)
_HASH_RE = re.compile(r"####\s*(?:\*\*)?\s*(" + _NUM + ")")
_ANSWER_IS_RE = re.compile(
    r"(?:final\s+)?answer\s*(?:is\b\s*:?|:|=)\s*(?:\*\*)?\s*(?:\\\(|\$\$?)?\s*(" + _NUM + ")", re.IGNORECASE
)
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def normalize_number(text: str) -> str | None:
    """Canonical string of a number written in ``text`` (``"$1,000.50"`` -> ``"1000.5"``).

    Returns None when ``text`` holds no number.
    """
    m = _NUM_RE.search(text)
    if m is None:
        return None
    s = m.group(0).replace("−", "-").replace("$", "").replace(",", "").replace(" ", "")
    try:
        d = Decimal(s)
    except InvalidOperation:
        return None
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def _last(pattern: re.Pattern[str], text: str) -> str | None:
    found = pattern.findall(text)
    return normalize_number(found[-1]) if found else None


def _boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}``, with nested braces balanced."""
    out = []
    for m in _BOXED_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end() : i - 1])
    return out


def extract_strict(text: str) -> str | None:
    """The answer under the strict conventions (``#### N`` or "the answer is N")."""
    return _last(_HASH_RE, text) or _last(_ANSWER_IS_RE, text)


def extract_last_number(text: str) -> str | None:
    """The last number in the text (lm-eval's flexible-extract)."""
    return _last(_NUM_RE, text)


def extract_answer(text: str) -> str | None:
    """The final answer: ``#### N``, ``\\boxed{}``, "the answer is N", else the last number."""
    hit = _last(_HASH_RE, text)
    if hit is not None:
        return hit
    for content in reversed(_boxed_contents(text)):
        hit = extract_last_number(content)
        if hit is not None:
            return hit
    return _last(_ANSWER_IS_RE, text) or extract_last_number(text)


def reference_answer(answer_field: str) -> str:
    """The gold answer of a GSM8k row: the number after its final ``####``."""
    if "####" not in answer_field:
        raise ValueError("GSM8k answer field has no '#### N' line")
    value = normalize_number(answer_field.rsplit("####", 1)[1])
    if value is None:
        raise ValueError(f"no number after '####' in {answer_field[-80:]!r}")
    return value


def score_gsm8k(completion: str, reference: str) -> dict:
    """Score one completion against a reference.

    ``reference`` may be the dataset's full ``answer`` field or just the number.
    Returns ``{"strict": bool, "flexible": bool, "extracted": str | None}``.
    """
    gold = reference_answer(reference) if "####" in reference else normalize_number(reference)
    if gold is None:
        raise ValueError(f"reference {reference!r} holds no number")
    strict = extract_strict(completion)
    extracted = extract_answer(completion)
    return {"strict": strict == gold, "flexible": extracted == gold, "extracted": extracted}
