"""Checks that speculative decoding is lossless (pure statistics): what the two checks share.

Speculative decoding must leave the target's output distribution unchanged:

* at temperature 0 the output should be token-identical to plain decoding:
  :mod:`specbench.analysis.lossless_greedy` (:func:`~specbench.analysis.lossless_greedy.compare_greedy`,
  :func:`~specbench.analysis.lossless_greedy.summarize_greedy`, the near-tie tolerances by dtype);
* at temperature > 0 rejection sampling keeps the target's distribution
  exactly, which we test with a randomized probability integral transform
  (PIT) of every sampled token under the target's own processed
  distribution: :mod:`specbench.analysis.lossless_sampled` (``pit_values``,
  ``uniformity_test``, ``two_sample_test``, ``distribution_verdict``).

Everything there is pure: numpy/scipy only, no I/O, no clocks, randomness
only through a passed :class:`numpy.random.Generator` (or a seed).
:mod:`specbench.analysis.equivalence` applies both to a run's records.

Verdicts are one of ``"equivalent"``, ``"divergent"`` and
``"not shown equivalent"``. The last one is not a soft "equivalent": it
means the data could not have shown a difference of the size we care
about (no logprobs to classify a divergence, too few tokens, a scorer that
fails on the baseline's own samples).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Verdict = Literal["equivalent", "divergent", "not shown equivalent"]


def clean_logprobs(d: Mapping[int, float] | None) -> dict[int, float] | None:
    """A position's ``{token id: logprob}`` as ints and floats (None when empty): JSON round-trips
    turn int keys into strings; both are accepted."""
    if not d:
        return None
    return {int(t): float(lp) for t, lp in d.items()}
