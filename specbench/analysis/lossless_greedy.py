"""Greedy identity (temperature 0): a method's outputs against the baseline's, token by token (pure).

At temperature 0 speculative decoding should be token-identical to plain decoding
(:func:`compare_greedy` per request, :func:`summarize_greedy` per group). A divergence whose
two tokens were within rounding of each other under the baseline's logprobs is a *near-tie*,
not a failure; how close counts as a tie depends on the dtype the logits are computed in
(:data:`TIE_TOLERANCE_BY_DTYPE`, :func:`tie_tolerance_for`). The verdicts are those of
:mod:`specbench.analysis.lossless`; the sampled test (temperature > 0) is
:mod:`specbench.analysis.lossless_sampled`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from specbench.analysis.lossless import Verdict, clean_logprobs
from specbench.stats import Estimate, wilson_interval

GreedyKind = Literal["identical", "near_tie", "divergent", "unverifiable"]

#: Default tolerance (nats) for calling a greedy divergence a near-tie.
#:
#: Speculative decoding scores the target on K+1 positions in one forward
#: pass, plain decoding on one; the GEMM shapes, kernels and reduction orders
#: differ, so the logits differ by rounding even though the math is the same.
#: In float32 a logit of magnitude |z| <= 30 is stored with a relative error
#: of 2**-24 (about 2e-6 absolute), and re-ordered reductions over a few
#: thousand hidden units and a few dozen layers accumulate that to roughly
#: 1e-6 .. 1e-4 nats. 1e-3 nats leaves >= 10x headroom over that noise while
#: staying far below the gap of a genuinely different greedy choice (a bug
#: picks a token that is typically >= 0.1 nats below the top). It is a
#: float32 (CPU) default: half-precision runs need a larger tolerance, see
#: :data:`TIE_TOLERANCE_BY_DTYPE`.
DEFAULT_TIE_TOLERANCE = 1e-3

#: Rough near-tie tolerances (nats) by the dtype the logits are computed in.
#: Half-precision logits are rounded to the format's spacing before the
#: float32 log-softmax: at |z| in [16, 32) that spacing is 2**-6 (float16)
#: and 2**-3 (bfloat16); a re-ordered reduction can move each of two logits
#: by about one spacing, so the gap between them by about two. These are
#: heuristics for typical logit magnitudes, not guarantees: pass
#: ``tie_tolerance`` explicitly when you know better.
TIE_TOLERANCE_BY_DTYPE: dict[str, float] = {
    "float32": DEFAULT_TIE_TOLERANCE,
    "float16": 2 * 2.0**-6,
    "bfloat16": 2 * 2.0**-3,
}

_DTYPE_ALIASES = {
    "float32": "float32", "float": "float32", "fp32": "float32",
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}


def canonical_dtype(dtype: str | None) -> str | None:
    """``"torch.bfloat16"``, ``"bf16"``, ``"bfloat16"`` → ``"bfloat16"``; ``"auto"``, None or
    an unknown name → None."""
    if not dtype:
        return None
    return _DTYPE_ALIASES.get(str(dtype).strip().lower().removeprefix("torch."))


def tie_tolerance_for(dtypes: Sequence[str | None]) -> tuple[float, str]:
    """The near-tie tolerance for comparing outputs of engines computing in ``dtypes``.

    Both sides' rounding moves the logits, so the coarser dtype decides: the largest
    :data:`TIE_TOLERANCE_BY_DTYPE` entry among the known dtypes. Returns the tolerance
    and where it came from (the dtype's name; the float32 default, marked as a guess,
    when no dtype is known).
    """
    known = [d for d in (canonical_dtype(x) for x in dtypes) if d is not None]
    if not known:
        return DEFAULT_TIE_TOLERANCE, "float32 default (dtype unknown)"
    worst = max(known, key=lambda d: TIE_TOLERANCE_BY_DTYPE[d])
    return TIE_TOLERANCE_BY_DTYPE[worst], worst


@dataclass(frozen=True)
class GreedyComparison:
    """One request's greedy output under a method versus the baseline.

    ``kind``:

    * ``identical`` — same token ids, same length;
    * ``near_tie`` — first divergence at a position where the method's token
      is within ``tie_tolerance`` nats of the baseline's top token
      (numerical noise between two almost equally likely tokens);
    * ``divergent`` — the method's token at the first divergence is more
      than ``tie_tolerance`` below the top (exactly, or provably from a
      bound); a real difference;
    * ``unverifiable`` — they diverge but the baseline's logprobs at that
      position are missing or cannot bound the gap.

    ``logprob_gap`` is top-logprob minus the method token's logprob at the
    divergence (nats); when the method's token is outside the recorded
    top-k (or absent because the method stopped) it is a lower bound and
    ``gap_is_bound`` is True.
    """

    identical: bool
    first_divergence: int | None
    kind: GreedyKind
    baseline_token: int | None = None
    method_token: int | None = None
    logprob_gap: float | None = None
    gap_is_bound: bool = False
    reason: str = ""


def _outside_bound(lp: dict[int, float]) -> float:
    """Upper bound on the logprob of any token not in ``lp``.

    Such a token is no more likely than the least likely recorded one (the
    dict is a top-k) and no more likely than all unrecorded mass together.
    """
    lo = min(lp.values())
    rest = 1.0 - math.fsum(math.exp(v) for v in lp.values())
    # The mass bound needs normalised logprobs; a recorded mass of ~1 or more
    # (rounding, or not logprobs at all) leaves only the top-k bound.
    if rest > 1e-6:
        return min(lo, math.log(rest))
    return lo


def compare_greedy(
    baseline_ids: Sequence[int],
    method_ids: Sequence[int],
    baseline_logprobs: Sequence[Mapping[int, float] | None] | None = None,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> GreedyComparison:
    """Compare a method's greedy token ids with the baseline's.

    ``baseline_logprobs`` is the baseline's top-k logprobs per generated
    position (``RequestRecord.logprobs``: a list of ``{token_id: logprob}``,
    of the full, normalized distribution; at temperature 0 raw and processed
    coincide). Only the first divergence matters: after it the two
    continuations condition on different prefixes and need not agree.

    Classification at the first divergence ``d``: the method's token ``t``
    is a near-tie when ``top - logprob(t) <= tie_tolerance``, else divergent.
    If ``t`` is outside the recorded top-k its logprob is bounded above by
    the smallest recorded logprob and by ``log(1 - recorded mass)``, so a
    bound above the tolerance still proves a divergence; otherwise the case
    is unverifiable.

    Length differences: if one sequence is a strict prefix of the other the
    divergence is at ``d = min length`` (one stopped — EOS, stop string —
    where the other went on). When the method stopped, its token at ``d`` is
    unknown but differs from the baseline's, so the gap is bounded by the
    baseline's margin between its chosen token and the best other token.
    When the baseline stopped, its logprobs usually end at ``d - 1`` and the
    case is unverifiable unless an entry for ``d`` was recorded.

    Assumes the baseline itself decoded greedily from the logprobs it
    recorded (its token is the top one); the gap is measured from the top
    logprob either way.
    """
    if tie_tolerance < 0:
        raise ValueError(f"tie_tolerance must be >= 0, got {tie_tolerance}")
    b = [int(t) for t in baseline_ids]
    m = [int(t) for t in method_ids]
    common = min(len(b), len(m))
    d = next((i for i in range(common) if b[i] != m[i]), None)
    if d is None:
        if len(b) == len(m):
            return GreedyComparison(
                identical=True, first_divergence=None, kind="identical", reason="identical"
            )
        d = common
    bt = b[d] if d < len(b) else None
    mt = m[d] if d < len(m) else None
    what = (
        "token mismatch"
        if bt is not None and mt is not None
        else ("method stopped early" if mt is None else "baseline stopped early")
    )

    def result(kind: GreedyKind, gap: float | None, bound: bool, why: str) -> GreedyComparison:
        return GreedyComparison(
            identical=False,
            first_divergence=d,
            kind=kind,
            baseline_token=bt,
            method_token=mt,
            logprob_gap=gap,
            gap_is_bound=bound,
            reason=f"{what} at position {d}: {why}",
        )

    lp = None
    if baseline_logprobs is not None and d < len(baseline_logprobs):
        lp = clean_logprobs(baseline_logprobs[d])
    if lp is None:
        return result("unverifiable", None, False, "no baseline logprobs at that position")
    top = max(lp.values())

    if mt is not None:
        if mt in lp:
            gap = top - lp[mt]
            if gap <= tie_tolerance:
                return result("near_tie", gap, False, f"gap {gap:.3g} nats <= tolerance {tie_tolerance:g}")
            return result("divergent", gap, False, f"gap {gap:.3g} nats > tolerance {tie_tolerance:g}")
        bound = top - _outside_bound(lp)
    else:
        # The method emitted some token other than the baseline's (it stopped).
        others = [v for t, v in lp.items() if t != bt]
        best_other = max(others) if others else -math.inf
        if bt is None or bt not in lp:
            best_other = top  # cannot exclude the top token
        bound = top - max(best_other, _outside_bound(lp))
    if bound > tie_tolerance:
        return result("divergent", bound, True, f"gap >= {bound:.3g} nats > tolerance {tie_tolerance:g}")
    return result(
        "unverifiable",
        bound,
        True,
        f"method token's gap only bounded below by {bound:.3g} nats (<= tolerance {tie_tolerance:g})",
    )


@dataclass(frozen=True)
class GreedySummary:
    """Greedy identity over a set of requests.

    ``match_rate`` is the share of token-identical outputs (``nan`` when
    ``n == 0``) and ``match_ci`` its Wilson interval; ``consistent_rate``
    counts near-ties as consistent too. ``verdict``:

    * ``equivalent`` — every output is identical or a near-tie;
    * ``divergent`` — at least one real divergence;
    * ``not shown equivalent`` — no data, or some divergences could not be
      classified (and none is provably real).
    """

    n: int
    n_identical: int
    n_near_tie: int
    n_divergent: int
    n_unverifiable: int
    match_rate: float
    match_ci: tuple[float, float]
    consistent_rate: float
    consistent_ci: tuple[float, float]
    confidence: float
    verdict: Verdict
    divergent_indices: tuple[int, ...]
    unverifiable_indices: tuple[int, ...]
    reason: str

    @property
    def match(self) -> Estimate:
        """The identical-output rate as a report :class:`~specbench.stats.Estimate`."""
        return _rate_estimate(self.n_identical, self.n, self.match_ci)

    @property
    def consistent(self) -> Estimate:
        """Identical-or-near-tie rate as an :class:`~specbench.stats.Estimate`."""
        return _rate_estimate(self.n_identical + self.n_near_tie, self.n, self.consistent_ci)


def _rate_estimate(k: int, n: int, ci: tuple[float, float]) -> Estimate:
    if n == 0:
        return Estimate(value=None, n=0)
    return Estimate(value=k / n, ci_low=ci[0], ci_high=ci[1], n=n, method="wilson")


def summarize_greedy(results: Sequence[GreedyComparison], confidence: float = 0.95) -> GreedySummary:
    """Count kinds, give the match rate with a Wilson CI, and a verdict."""
    kinds = [r.kind for r in results]
    n = len(kinds)
    n_id = kinds.count("identical")
    n_tie = kinds.count("near_tie")
    n_div = kinds.count("divergent")
    n_unv = kinds.count("unverifiable")
    div_idx = tuple(i for i, k in enumerate(kinds) if k == "divergent")
    unv_idx = tuple(i for i, k in enumerate(kinds) if k == "unverifiable")
    verdict: Verdict
    if n_div:
        verdict = "divergent"
        reason = f"{n_div} of {n} outputs diverge beyond numerical noise"
    elif n == 0:
        verdict = "not shown equivalent"
        reason = "no outputs to compare"
    elif n_unv:
        verdict = "not shown equivalent"
        reason = f"{n_unv} of {n} outputs diverge where logprobs cannot tell noise from a real difference"
    else:
        verdict = "equivalent"
        reason = f"{n_id} of {n} identical, {n_tie} near-ties (numerical noise)"
    nan = float("nan")
    return GreedySummary(
        n=n,
        n_identical=n_id,
        n_near_tie=n_tie,
        n_divergent=n_div,
        n_unverifiable=n_unv,
        match_rate=n_id / n if n else nan,
        match_ci=wilson_interval(n_id, n, confidence),
        consistent_rate=(n_id + n_tie) / n if n else nan,
        consistent_ci=wilson_interval(n_id + n_tie, n, confidence),
        confidence=confidence,
        verdict=verdict,
        divergent_indices=div_idx,
        unverifiable_indices=unv_idx,
        reason=reason,
    )
