"""Degenerate outputs: repetition loops, measured per request (issue 34).

A loop is trivially drafted: on an output that repeats itself every drafter reaches τ ≈ K+1, and
the number says nothing about the drafter. Two independent measures, both on a request's output
token ids (no tokenizer, no text):

* **final-cycle coverage** (the primary one, :func:`loop_coverage`): the share of the output
  covered by its final repeating cycle. For each period ``p`` up to :data:`MAX_PERIOD` the longest
  suffix in which every token equals the token ``p`` places earlier is found; a cycle counts when
  that suffix holds at least two full periods. The coverage is the longest such suffix over the
  output's length. A request is *degenerate* when the coverage exceeds :data:`COVERAGE_LIMIT`
  (its final loop fills more than half the output).
* **distinct 4-grams of the second half** (:func:`distinct_ngram_ratio`): distinct 4-grams over
  4-grams in the output's second half; below :data:`DISTINCT_LIMIT` the text mostly repeats
  itself, wherever the repetition sits. Used as the independent cross-check.

Outputs shorter than :data:`MIN_TOKENS` tokens are *short*: too short for either measure to mean
much, they are neither degenerate nor varied and are counted as their own share.

Per group (the catalogue's ``degenerate_share`` and ``short_share``, :mod:`specbench.results.metric_catalog`)
the share of its successful requests of each class, with a Wilson interval over requests. A verdict
or number that rests on a group (or, for a ratio, either arm) with more than :data:`MARK_SHARE` of its
requests degenerate is marked :data:`MARK` wherever it is shown (:func:`rests_on_loops`).

The measure lives here, below the analysis, because the catalogue computes the group shares from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from specbench import stats

if TYPE_CHECKING:
    from specbench.results.records import RequestRecord, SpecCounters
    from specbench.stats import Estimate

MAX_PERIOD = 16  # the longest cycle looked for, in tokens
COVERAGE_LIMIT = 0.5  # degenerate: the final cycle covers more than this share of the output
DISTINCT_LIMIT = 0.5  # the second measure: fewer distinct 4-grams than this share in the second half
MIN_TOKENS = 32  # shorter outputs are "short", judged by neither measure
NGRAM = 4
MARK_SHARE = 0.2  # a verdict resting on more than this share of degenerate requests is marked
MARK = "†"
MARK_NOTE = (f"{MARK}: rests on a group with more than {MARK_SHARE:.0%} of its requests degenerate (the final "
             f"repetition loop covers more than half the output): τ near K+1 there measures the loop, not the drafter")

OutputClass = Literal["short", "degenerate", "varied"]


def loop_coverage(tokens: Sequence[int], max_period: int = MAX_PERIOD) -> float:
    """Share of ``tokens`` covered by their final repeating cycle (0 when there is none).

    A cycle of period ``p`` covers the longest suffix ``s`` with ``s[i] == s[i - p]`` for every
    position past its first ``p`` tokens, provided ``s`` holds at least two full periods.
    """
    n = len(tokens)
    if n < 2:
        return 0.0
    best = 0
    for p in range(1, min(max_period, n // 2) + 1):
        run = 0  # positions j, counted back from the end, with tokens[j] == tokens[j - p]
        j = n - 1
        while j >= p and tokens[j] == tokens[j - p]:
            run += 1
            j -= 1
        if run >= p:  # the suffix (run + p tokens) holds two full periods or more
            best = max(best, run + p)
    return best / n


def distinct_ngram_ratio(tokens: Sequence[int], n: int = NGRAM) -> float:
    """Distinct ``n``-grams over ``n``-grams in the second half of ``tokens`` (1.0 when it has none)."""
    half = list(tokens[len(tokens) // 2:])
    grams = [tuple(half[i:i + n]) for i in range(len(half) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


@dataclass(frozen=True)
class Degeneracy:
    """One output judged: its class and both measures."""

    n_tokens: int
    coverage: float
    distinct: float

    @property
    def short(self) -> bool:
        return self.n_tokens < MIN_TOKENS

    @property
    def degenerate(self) -> bool:
        """The primary verdict: the final loop covers more than half the output."""
        return not self.short and self.coverage > COVERAGE_LIMIT

    @property
    def repetitive(self) -> bool:
        """The independent verdict: fewer than half the second half's 4-grams are distinct."""
        return not self.short and self.distinct < DISTINCT_LIMIT

    @property
    def output_class(self) -> OutputClass:
        return "short" if self.short else "degenerate" if self.degenerate else "varied"


def judge(tokens: Sequence[int]) -> Degeneracy:
    return Degeneracy(n_tokens=len(tokens), coverage=loop_coverage(tokens), distinct=distinct_ngram_ratio(tokens))


def is_degenerate(r: RequestRecord) -> bool:
    """A successful request whose output is degenerate (the primary measure)."""
    return r.error is None and judge(r.output_token_ids).degenerate


def _share(requests: Sequence[RequestRecord], cls: OutputClass) -> Estimate | None:
    ok = [r for r in requests if r.error is None]
    if not ok:
        return None
    return stats.wilson(sum(judge(r.output_token_ids).output_class == cls for r in ok), len(ok))


def degenerate_share(counters: SpecCounters | None, requests: Sequence[RequestRecord]) -> Estimate | None:
    """Share of a group's successful requests whose output is degenerate; Wilson over requests."""
    return _share(requests, "degenerate")


def short_share(counters: SpecCounters | None, requests: Sequence[RequestRecord]) -> Estimate | None:
    """Share of a group's successful requests shorter than :data:`MIN_TOKENS` tokens; Wilson over requests."""
    return _share(requests, "short")


def rests_on_loops(groups: Iterable[Any]) -> bool:
    """Whether any of ``groups`` (group summaries; None skipped) has more than :data:`MARK_SHARE` of its
    requests degenerate. A summary analysed before the measure existed has no share: never marked."""
    for g in groups:
        share = (getattr(g, "metrics", None) or {}).get("degenerate_share") if g is not None else None
        if share is not None and share.value is not None and share.value > MARK_SHARE:
            return True
    return False


def mark(text: str, marked: bool) -> str:
    """``text`` with :data:`MARK` appended when ``marked``."""
    return text + MARK if marked else text
