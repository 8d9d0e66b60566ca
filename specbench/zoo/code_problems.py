"""Generated small Python functions in the layout of HumanEval's prompts, with their bodies.

Training text for the zoo's target (issue 34): cpu-smoke sends HumanEval prompts raw (a signature
and a docstring with ``>>>`` examples), and a target trained only on the standard library continues
many of them with a loop. Each generated function comes from one of a dozen families (filter, map,
count, reduce, string edits, ...) with random names, operators and constants; its docstring's
examples are computed by running the generated body, so every example is true. A document is a
module of one to three such functions, as HumanEval's prompts are laid out (typing import, two
blank lines, four-space indentation).

The families, names and phrasings are this module's own, not HumanEval's: a unit test checks the
generated text against HumanEval's prompts by n-gram overlap (tests/unit/test_zoo_corpus_split.py).
Deterministic from the ``random.Random`` passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable

#: A family draws ``(function name, parameters, return annotation, docstring sentence, body)``.
Family = Callable[[random.Random], tuple[str, str, str, str, str]]

_LIST_ARGS = ["values", "items", "numbers", "data", "readings", "scores", "counts", "sizes"]
_STR_ARGS = ["text", "word", "line", "label", "phrase", "name", "message"]
_CMP = [(">", "greater than"), ("<", "less than"), (">=", "at least"), ("<=", "at most"), ("!=", "not equal to")]
_ARITH = [("+", "plus"), ("-", "minus"), ("*", "times"), ("//", "divided (floor) by"), ("%", "modulo")]
_CHARSETS = [("aeiou", "vowels"), ("0123456789", "digits"), (" ", "spaces"), (".,;:!?", "punctuation marks"),
             ("xyz", "letters x, y or z")]
_VERBS = ["keep", "pick", "select", "collect", "gather", "retain"]


def _ints(rng: random.Random) -> list[int]:
    return [rng.randint(-5, 20) for _ in range(rng.randint(3, 6))]


def _words(rng: random.Random) -> str:
    pool = ["red", "apple", "stone", "river", "Quick", "tree", "moon", "Sky", "lamp", "code", "data", "box",
            "Tiger", "sun", "road", "map", "ice", "owl", "Echo", "zip"]
    return " ".join(rng.sample(pool, rng.randint(2, 4)))


def _list_comparison(rng: random.Random) -> tuple[str, str, str, int]:
    """A list parameter, a comparison (operator and words) and a constant (the filter and count families)."""
    arg = rng.choice(_LIST_ARGS)
    (op, words), c = rng.choice(_CMP), rng.randint(0, 9)
    return arg, op, words, c


def filter_cmp(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg, op, words, c = _list_comparison(rng)
    name = f"{rng.choice(_VERBS)}_{arg}_{words.split()[0]}_{c}"
    doc = f"Return the {arg} that are {words} {c}, in their original order."
    body = f"    result = []\n    for x in {arg}:\n        if x {op} {c}:\n            result.append(x)\n    return result\n"
    return name, f"{arg}: List[int]", "List[int]", doc, body


def map_arith(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg = rng.choice(_LIST_ARGS)
    (op, words), c = rng.choice(_ARITH), rng.randint(2, 7)
    name = f"{arg}_{words.split()[0]}_{c}"
    doc = f"Return a new list with each of the {arg} {words} {c}."
    body = f"    return [x {op} {c} for x in {arg}]\n"
    return name, f"{arg}: List[int]", "List[int]", doc, body


def count_cmp(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg, op, words, c = _list_comparison(rng)
    name = f"count_{arg}_{words.split()[0]}_{c}"
    doc = f"Count how many of the {arg} are {words} {c}."
    body = f"    total = 0\n    for x in {arg}:\n        if x {op} {c}:\n            total += 1\n    return total\n"
    return name, f"{arg}: List[int]", "int", doc, body


def reduce_sum(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg = rng.choice(_LIST_ARGS)
    kind = rng.choice(["sum", "squares", "product", "largest", "smallest", "range"])
    bodies = {
        "sum": ("Add up all the {a}.", "    total = 0\n    for x in {a}:\n        total += x\n    return total\n"),
        "squares": ("Return the sum of the squares of the {a}.",
                    "    return sum(x * x for x in {a})\n"),
        "product": ("Multiply all the {a} together; an empty list gives 1.",
                    "    result = 1\n    for x in {a}:\n        result *= x\n    return result\n"),
        "largest": ("Return the largest of the {a}, or None when there are none.",
                    "    if not {a}:\n        return None\n    best = {a}[0]\n    for x in {a}[1:]:\n"
                    "        if x > best:\n            best = x\n    return best\n"),
        "smallest": ("Return the smallest of the {a}, or None when there are none.",
                     "    if not {a}:\n        return None\n    return min({a})\n"),
        "range": ("Return the difference between the largest and the smallest of the {a}.",
                  "    if not {a}:\n        return 0\n    return max({a}) - min({a})\n"),
    }
    doc, body = bodies[kind]
    ret = "Optional[int]" if kind in ("largest", "smallest") else "int"
    return f"{kind}_of_{arg}", f"{arg}: List[int]", ret, doc.format(a=arg), body.format(a=arg)


def running(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg = rng.choice(_LIST_ARGS)
    kind = rng.choice(["total", "maximum", "difference"])
    bodies = {
        "total": ("Return the running total of the {a}: element i is the sum of the first i + 1.",
                  "    out = []\n    acc = 0\n    for x in {a}:\n        acc += x\n        out.append(acc)\n    return out\n"),
        "maximum": ("Return the running maximum of the {a}.",
                    "    out = []\n    for i, x in enumerate({a}):\n        out.append(x if i == 0 else max(out[-1], x))\n"
                    "    return out\n"),
        "difference": ("Return the differences between neighbouring {a} (one fewer element).",
                       "    return [b - a for a, b in zip({a}, {a}[1:])]\n"),
    }
    doc, body = bodies[kind]
    return f"running_{kind}_{arg}", f"{arg}: List[int]", "List[int]", doc.format(a=arg), body.format(a=arg)


def count_chars(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg = rng.choice(_STR_ARGS)
    chars, words = rng.choice(_CHARSETS)
    name = f"count_{words.split()[0].rstrip(',')}_in_{arg}"
    doc = f"Count the {words} in the given {arg}."
    body = f"    return sum(1 for ch in {arg} if ch in {chars!r})\n"
    return name, f"{arg}: str", "int", doc, body


def string_edit(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg = rng.choice(_STR_ARGS)
    kind = rng.choice(["reverse", "upper_words", "initials", "strip_chars", "double", "join_dash"])
    chars, words = rng.choice(_CHARSETS)
    bodies = {
        "reverse": ("Return the words of {a} in reverse order, joined by single spaces.",
                    "    return ' '.join(reversed({a}.split()))\n"),
        "upper_words": ("Capitalise the first letter of every word in {a}.",
                        "    return ' '.join(w[:1].upper() + w[1:] for w in {a}.split())\n"),
        "initials": ("Return the first letter of each word of {a}, upper-cased.",
                     "    return ''.join(w[0].upper() for w in {a}.split() if w)\n"),
        "strip_chars": (f"Remove every one of the {words} from {{a}}.",
                        f"    return ''.join(ch for ch in {{a}} if ch not in {chars!r})\n"),
        "double": ("Repeat every character of {a} twice.", "    return ''.join(ch * 2 for ch in {a})\n"),
        "join_dash": ("Join the words of {a} with dashes, in lower case.",
                      "    return '-'.join(w.lower() for w in {a}.split())\n"),
    }
    doc, body = bodies[kind]
    return f"{kind}_{arg}", f"{arg}: str", "str", doc.format(a=arg), body.format(a=arg)


def word_stats(rng: random.Random) -> tuple[str, str, str, str, str]:
    arg = rng.choice(_STR_ARGS)
    n = rng.randint(2, 5)
    kind = rng.choice(["longest", "count_long", "lengths", "sorted"])
    bodies = {
        "longest": ("Return the longest word of {a}; the first one on a tie, '' when there is none.",
                    "    best = ''\n    for w in {a}.split():\n        if len(w) > len(best):\n            best = w\n"
                    "    return best\n", "str"),
        "count_long": (f"Count the words of {{a}} with more than {n} letters.",
                       f"    return len([w for w in {{a}}.split() if len(w) > {n}])\n", "int"),
        "lengths": ("Return the length of each word of {a}.", "    return [len(w) for w in {a}.split()]\n",
                    "List[int]"),
        "sorted": ("Return the words of {a} sorted by length, shortest first (stable).",
                   "    return sorted({a}.split(), key=len)\n", "List[str]"),
    }
    doc, body, ret = bodies[kind]
    return f"{kind}_words_of_{arg}", f"{arg}: str", ret, doc.format(a=arg), body.format(a=arg)


def number_fn(rng: random.Random) -> tuple[str, str, str, str, str]:
    kind = rng.choice(["digit_sum", "divisors", "multiples", "steps_to_one", "triangle"])
    k = rng.randint(2, 9)
    bodies = {
        "digit_sum": ("Return the sum of the decimal digits of n (n is not negative).",
                      "    total = 0\n    while n > 0:\n        total += n % 10\n        n //= 10\n    return total\n", "int"),
        "divisors": ("Return every positive divisor of n in increasing order.",
                     "    return [d for d in range(1, n + 1) if n % d == 0]\n", "List[int]"),
        "multiples": (f"Return the multiples of {k} from 1 up to and including n.",
                      f"    return [x for x in range(1, n + 1) if x % {k} == 0]\n", "List[int]"),
        "steps_to_one": ("Count the halving steps (rounding down) that take n down to 1.",
                         "    steps = 0\n    while n > 1:\n        n //= 2\n        steps += 1\n    return steps\n", "int"),
        "triangle": ("Return 1 + 2 + ... + n.", "    total = 0\n    for i in range(1, n + 1):\n        total += i\n"
                     "    return total\n", "int"),
    }
    doc, body, ret = bodies[kind]
    suffix = f"_{k}" if kind == "multiples" else ""
    return f"{kind}{suffix}", "n: int", ret, doc, body


FAMILIES: list[Family] = [filter_cmp, map_arith, count_cmp, reduce_sum, running, count_chars, string_edit, word_stats,
            number_fn]


def _example_args(rng: random.Random, signature: str) -> tuple:
    if signature.endswith("List[int]"):
        return (_ints(rng),)
    if signature.endswith("str"):
        return (_words(rng),)
    return (rng.randint(1, 30),)


def function(rng: random.Random, family: Family) -> tuple[str, set[str]]:
    """One function of ``family``: its source (signature, docstring with two computed examples,
    body) and the ``typing`` names it uses."""
    name, sig, ret, doc, body = family(rng)
    src = f"def {name}({sig}) -> {ret}:\n{body}"
    scope: dict = {}
    exec(compile("from typing import List, Optional\n" + src, "<generated>", "exec"), scope)  # noqa: S102
    examples = []
    for _ in range(2):
        args = _example_args(rng, sig)
        examples.append(f"    >>> {name}({', '.join(map(repr, args))})\n    {scope[name](*args)!r}\n")
    text = f'def {name}({sig}) -> {ret}:\n    """ {doc}\n{"".join(examples)}    """\n{body}'
    uses = {t for t in ("List", "Optional") if t in sig or t in ret}
    return text, uses


def module(rng: random.Random) -> str:
    """A document: one to three functions under the ``typing`` import they need."""
    funcs, uses = [], set()
    for family in rng.sample(FAMILIES, rng.randint(1, 3)):
        text, u = function(rng, family)
        funcs.append(text)
        uses |= u
    head = f"from typing import {', '.join(sorted(uses))}\n\n\n" if uses else ""
    return head + "\n\n".join(funcs) + "\n\n"


def code_texts(*, split: str, n: int, seed: int) -> list[str]:
    """``n`` modules, deterministic from ``seed``; the held-out split draws from its own stream."""
    rng = random.Random(seed * 1_000_003 + (7919 if split == "train" else 104_729))
    return [module(rng) for _ in range(n)]
