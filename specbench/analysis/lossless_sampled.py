"""The distribution test (temperature > 0): randomized PIT of sampled tokens (pure).

Rejection sampling keeps the target's distribution exactly, so the randomized probability
integral transform of every sampled token under the target's own processed distribution is
uniform; :func:`pit_values` computes it, :func:`uniformity_test` (one sample) and
:func:`two_sample_test` (against the baseline) test it, :func:`distribution_verdict` decides,
:func:`~specbench.stats.min_detectable_tv` says what the data could have seen, and
:func:`false_alarm_pvalue` checks the test's own level on exact samplers. Numpy/scipy only;
randomness only through a passed :class:`numpy.random.Generator` (or a seed). The verdicts are
those of :mod:`specbench.analysis.lossless`; greedy identity (temperature 0) is
:mod:`specbench.analysis.lossless_greedy`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special, stats

from specbench.analysis.lossless import Verdict, clean_logprobs
from specbench.stats import min_detectable_tv, min_tokens_for_tv

CategoryOrder = Literal["probability", "token_id"]

#: Default total-variation distance the distribution test must be able to
#: detect (at ``alpha`` with ``power``) before it may say "equivalent".
DEFAULT_TARGET_TV = 0.1


def false_alarm_pvalue(k: int, m: int, alpha: float = 0.01) -> float:
    """One-sided binomial p-value for ``k`` rejections in ``m`` lossless runs.

    Each of ``m`` independent runs of a sampler known to be exact was tested
    at nominal level ``alpha`` and ``k`` of them rejected. Under a valid test
    ``k ~ Binomial(m, alpha')`` with ``alpha' <= alpha``; the p-value is
    ``P(K >= k)`` at ``alpha' = alpha``. A small value says the test rejects
    exact samplers more often than it promises (it is anti-conservative).
    """
    if m < 1 or k < 0 or k > m:
        raise ValueError(f"need 0 <= k <= m and m >= 1, got k={k}, m={m}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return float(stats.binomtest(k, m, alpha, alternative="greater").pvalue)


def coarsen_topk(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` token ids and logprobs of each row of full distributions.

    ``probs`` is ``(n, V)`` (rows sum to 1). Returns ``(ids, logprobs)``,
    both ``(n, k)``, ordered by descending probability (ties by id). This is
    what a scorer that records top-k logprobs sees; the remaining mass is the
    tail bucket. Zero-probability entries get logprob ``-inf``.
    """
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2:
        raise ValueError("probs must be (n, V)")
    k = min(int(k), p.shape[1])
    if k < 1:
        raise ValueError("k must be >= 1")
    part = np.argpartition(-p, k - 1, axis=1)[:, :k] if k < p.shape[1] else np.tile(np.arange(k), (len(p), 1))
    vals = np.take_along_axis(p, part, axis=1)
    order = np.lexsort((part, -vals), axis=-1)
    ids = np.take_along_axis(part, order, axis=1)
    with np.errstate(divide="ignore"):
        lps = np.log(np.take_along_axis(vals, order, axis=1))
    return ids.astype(np.int64), lps


def topk_arrays(dists: Sequence[Mapping[int, float]], k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Pack per-position ``{token_id: logprob}`` dicts into ``(n, k)`` arrays.

    Each position keeps its ``k`` most probable entries (ties by token id);
    the rest fall into the tail bucket. Short rows are padded with id ``-1``
    and logprob ``-inf``.

    ``k=None`` uses the smallest dict size over positions. This matters:
    vLLM returns the top-k *plus the sampled (or teacher-forced) token when it
    is outside the top-k*, so some positions carry k+1 entries. Keeping that
    extra entry makes the partition into categories depend on the observed
    token, and the PIT is then no longer exact (the token would be measured
    against its own probability instead of the tail bucket's). Cutting every
    position to its top-k restores a partition that depends only on the
    distribution. Pass the engine's ``k`` explicitly when you know it.
    """
    rows = [clean_logprobs(d) for d in dists]
    for i, r in enumerate(rows):
        if r is None:
            raise ValueError(f"position {i} has no logprobs")
    if k is None:
        k = min((len(r) for r in rows if r is not None), default=1)
    if k < 1:
        raise ValueError("k must be >= 1")
    n = len(rows)
    ids = np.full((n, k), -1, dtype=np.int64)
    lps = np.full((n, k), -np.inf, dtype=np.float64)
    for i, r in enumerate(rows):
        assert r is not None
        items = sorted(r.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        for j, (t, v) in enumerate(items):
            ids[i, j] = t
            lps[i, j] = v
    return ids, lps


def pit_values_array(
    tokens: Sequence[int] | np.ndarray,
    topk_ids: np.ndarray,
    topk_logprobs: np.ndarray,
    rng: np.random.Generator | int | None,
    order: CategoryOrder = "probability",
) -> np.ndarray:
    """Randomized PIT of observed tokens under top-k + tail distributions.

    Row ``i`` describes the scoring distribution at position ``i``: the
    recorded tokens (``topk_ids``, ``-1`` = padding) with their logprobs
    under the target's *processed* distribution (after temperature, top-p,
    top-k — exactly what the sampler should sample from), and implicitly a
    tail bucket holding the rest of the mass, ``1 - sum(exp(logprobs))``.

    Categories are put in a canonical order that depends only on the row
    (never on the observed token): by descending probability, ties by token
    id (``order="probability"``), or by token id (``order="token_id"``); the
    tail bucket comes last. With ``F(c-)`` the mass before the observed
    category ``c`` and ``p(c)`` its mass, ``u = F(c-) + V * p(c)`` with
    ``V ~ U(0, 1)`` from ``rng``. A token outside the recorded ids lands in
    the tail bucket.

    Exactness: the coarsened variable (which category was hit) has exactly
    the coarsened distribution when the token was drawn from the processed
    distribution, and the randomized PIT of any discrete variable under its
    own distribution is U(0, 1). Conditioning on the past only changes the
    row, so along a sequence the ``u`` are iid U(0, 1) (Rosenblatt). Any
    difference between the sampler and the scorer that moves mass between
    categories moves the PIT; differences inside the tail bucket are
    invisible (the price of recording only top-k).

    Why probability order by default: typical failures (wrong temperature,
    wrong top-p, a draft that leaks through) move mass between likely and
    unlikely tokens in the same direction at every position. Ordering by
    probability turns that into a consistent shift of ``u`` that the KS
    test accumulates; ordering by id scatters it in random directions.

    Rows whose recorded mass exceeds 1 by float rounding are renormalised;
    more than 1e-3 over is an error (not logprobs of a distribution).
    """
    gen = np.random.default_rng(rng)
    tok = np.asarray(tokens, dtype=np.int64).reshape(-1)
    ids = np.asarray(topk_ids, dtype=np.int64)
    lps = np.asarray(topk_logprobs, dtype=np.float64)
    n = tok.shape[0]
    if ids.ndim != 2 or ids.shape != lps.shape or ids.shape[0] != n:
        raise ValueError(f"shape mismatch: tokens {tok.shape}, ids {ids.shape}, logprobs {lps.shape}")
    if n == 0:
        return np.zeros(0)
    if np.isnan(lps).any() or (lps > 1e-6).any():
        raise ValueError("logprobs must be <= 0 and not NaN")
    if (tok < 0).any():
        raise ValueError("token ids must be >= 0")
    lps = np.where(ids < 0, -np.inf, lps)
    s_ids = np.sort(np.where(ids < 0, -1 - np.arange(ids.shape[1]), ids), axis=1)
    if (np.diff(s_ids, axis=1) == 0).any():
        raise ValueError("duplicate token ids within a position")
    if order == "probability":
        perm = np.lexsort((ids, -lps), axis=-1)
    elif order == "token_id":
        perm = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids),), axis=-1)
    else:
        raise ValueError(f"unknown order {order!r}")
    ids = np.take_along_axis(ids, perm, axis=1)
    probs = np.exp(np.take_along_axis(lps, perm, axis=1))
    total = probs.sum(axis=1)
    if (total > 1 + 1e-3).any():
        i = int(np.argmax(total))
        raise ValueError(f"recorded probabilities sum to {total[i]:.6f} > 1 at position {i}")
    probs = probs / np.maximum(total, 1.0)[:, None]
    recorded = probs.sum(axis=1)
    tail = np.clip(1.0 - recorded, 0.0, 1.0)
    before = np.cumsum(probs, axis=1) - probs
    match = (ids == tok[:, None]) & (ids >= 0)
    found = match.any(axis=1)
    j = match.argmax(axis=1)
    r = np.arange(n)
    f_minus = np.where(found, before[r, j], recorded)
    mass = np.where(found, probs[r, j], tail)
    u = f_minus + gen.random(n) * mass
    return np.clip(u, 0.0, 1.0)


def pit_values(
    tokens: Sequence[int],
    dists: Sequence[Mapping[int, float]],
    rng: np.random.Generator | int | None,
    k: int | None = None,
    order: CategoryOrder = "probability",
) -> np.ndarray:
    """Randomized PIT values of sampled tokens under their scoring dicts.

    ``tokens[i]`` was sampled at position ``i``; ``dists[i]`` is the
    target's processed top-k logprobs at that position obtained *without*
    speculation (teacher forcing on the sampled sequence), as
    ``{token_id: logprob}``. See :func:`topk_arrays` for ``k`` (why extra
    entries must be cut) and :func:`pit_values_array` for the transform and
    why it is exactly U(0, 1) when sampler and scorer agree.
    """
    if len(tokens) != len(dists):
        raise ValueError(f"{len(tokens)} tokens but {len(dists)} distributions")
    if len(tokens) == 0:
        return np.zeros(0)
    ids, lps = topk_arrays(dists, k)
    return pit_values_array(tokens, ids, lps, rng, order=order)


def default_bins(n: int) -> int:
    """Equiprobable bins for the chi-square test: n // 50 clipped to [5, 20].

    At least 50 expected counts per bin for n >= 250 (chi-square
    approximation safe), 20 bins from n = 1000 on. Returns 0 (no chi-square)
    when n < 25, i.e. fewer than 5 expected per bin even with 5 bins.
    """
    if n < 25:
        return 0
    return int(min(20, max(5, n // 50)))


@dataclass(frozen=True)
class UniformityTest:
    """One-sample test that PIT values are U(0, 1).

    ``statistic`` is the KS distance D; ``pvalue`` the Bonferroni
    combination ``min(1, n_tests * min(ks_pvalue, chi2_pvalue))`` of the KS
    test and the binned chi-square test (``bins`` equiprobable bins; skipped
    — NaN, ``n_tests == 1`` — when ``n`` is too small).
    """

    n: int
    statistic: float
    pvalue: float
    ks_statistic: float
    ks_pvalue: float
    chi2_statistic: float
    chi2_pvalue: float
    bins: int
    n_tests: int


def _ks_uniform(x: np.ndarray) -> tuple[float, float]:
    """Two-sided one-sample KS against U(0, 1): D and its exact p-value.

    The same numbers as ``scipy.stats.kstest(x, "uniform")`` (which uses the
    exact ``kstwo`` distribution at these sizes) without its per-call overhead.
    """
    n = x.size
    xs = np.sort(x)
    i = np.arange(1, n + 1)
    d = float(max((i / n - xs).max(), (xs - (i - 1) / n).max()))
    return d, float(np.clip(stats.kstwo.sf(d, n), 0.0, 1.0))


def uniformity_test(u: Sequence[float] | np.ndarray, bins: int | None = None) -> UniformityTest:
    """Test PIT values against U(0, 1): KS plus binned chi-square, Bonferroni.

    KS is the most powerful of the two against a smooth shift of the PIT
    distribution (the usual failure: everything a bit too sharp or too
    flat); the chi-square over equiprobable bins catches local spikes (e.g.
    a pile of tokens the scorer gives zero probability). Bonferroni keeps
    the combination valid whatever their dependence. Assumes the ``u`` are
    independent given H0, which holds for PIT values along sequences.
    """
    x = np.asarray(u, dtype=np.float64).reshape(-1)
    n = int(x.size)
    nan = float("nan")
    if n == 0:
        return UniformityTest(0, nan, 1.0, nan, 1.0, nan, nan, 0, 0)
    if ((x < 0) | (x > 1)).any() or np.isnan(x).any():
        raise ValueError("PIT values must lie in [0, 1]")
    ks_stat, ks_p = _ks_uniform(x)
    b = default_bins(n) if bins is None else int(bins)
    chi_stat = chi_p = nan
    if b >= 2 and n >= 5 * b:
        counts = np.bincount(np.minimum((x * b).astype(np.int64), b - 1), minlength=b)
        expected = n / b
        chi_stat = float(((counts - expected) ** 2).sum() / expected)
        chi_p = float(special.chdtrc(b - 1, chi_stat))
    else:
        b = 0
    pvals = [ks_p] + ([chi_p] if b else [])
    m = len(pvals)
    return UniformityTest(
        n=n,
        statistic=ks_stat,
        pvalue=min(1.0, m * min(pvals)),
        ks_statistic=ks_stat,
        ks_pvalue=ks_p,
        chi2_statistic=chi_stat,
        chi2_pvalue=chi_p,
        bins=b,
        n_tests=m,
    )


@dataclass(frozen=True)
class TwoSampleTest:
    """Two-sample KS test of method PIT values against baseline PIT values."""

    statistic: float
    pvalue: float
    n_method: int
    n_baseline: int


def two_sample_test(
    method_u: Sequence[float] | np.ndarray, baseline_u: Sequence[float] | np.ndarray
) -> TwoSampleTest:
    """Two-sample KS: method's PIT values versus the baseline cell's own.

    Both sets must be scored the same way (same scorer, same processing).
    This guards against an imperfect scorer: if the scorer's processing does
    not match the engine's sampler, the baseline's PIT values are not
    uniform either, and the question becomes whether the method departs
    from what plain decoding does. With ``n`` and ``m`` tokens its power is
    that of a one-sample test with about ``n*m/(n+m)`` tokens.
    """
    a = np.asarray(method_u, dtype=np.float64).reshape(-1)
    b = np.asarray(baseline_u, dtype=np.float64).reshape(-1)
    if a.size == 0 or b.size == 0:
        return TwoSampleTest(float("nan"), 1.0, int(a.size), int(b.size))
    r = stats.ks_2samp(a, b)
    return TwoSampleTest(float(r.statistic), float(r.pvalue), int(a.size), int(b.size))


@dataclass(frozen=True)
class DistributionVerdict:
    """Outcome of the sampled-output (temperature > 0) equivalence check.

    ``pvalue`` is the Bonferroni combination over all tests used
    (``n_tests``: KS and chi-square on the method, plus the two-sample KS
    when a baseline is given). ``detectable_tv`` is
    :func:`min_detectable_tv` at ``n_tokens``; ``min_tokens`` the number of
    tokens needed to detect ``target_tv``.
    """

    verdict: Verdict
    reason: str
    n_tokens: int
    pvalue: float
    alpha: float
    power: float
    n_tests: int
    detectable_tv: float
    target_tv: float
    min_tokens: int
    method: UniformityTest
    baseline: UniformityTest | None = None
    two_sample: TwoSampleTest | None = None


def distribution_verdict(
    method_u: Sequence[float] | np.ndarray,
    baseline_u: Sequence[float] | np.ndarray | None = None,
    *,
    alpha: float = 0.01,
    power: float = 0.95,
    target_tv: float = DEFAULT_TARGET_TV,
    bins: int | None = None,
) -> DistributionVerdict:
    """Verdict on a method's sampled outputs from their PIT values.

    ``method_u`` are the method's PIT values; ``baseline_u`` (optional) those
    of the baseline cell's own samples, scored the same way.

    * ``divergent`` — uniformity rejected at ``alpha`` (Bonferroni over the
      KS, chi-square and, with a baseline, two-sample KS tests). If the
      baseline fails its own uniformity test the scorer does not reproduce
      the engine's sampling, the one-sample tests are not trusted, and only
      the two-sample test can declare a divergence.
    * ``not shown equivalent`` — not rejected, but the data could not have
      detected an aligned per-token TV error of ``target_tv`` (too few
      tokens), or the scorer fails on the baseline, or there are no tokens.
    * ``equivalent`` — not rejected with enough tokens; ``detectable_tv``
      says what size of error was ruled out (with ``power``).

    Under H0 the chance of a false ``divergent`` is at most ``alpha``.
    """
    mt = uniformity_test(method_u, bins)
    bt = uniformity_test(baseline_u, bins) if baseline_u is not None else None
    two = two_sample_test(method_u, baseline_u) if baseline_u is not None else None
    n = mt.n
    pvals = [mt.ks_pvalue]
    if mt.n_tests == 2:
        pvals.append(mt.chi2_pvalue)
    if two is not None:
        pvals.append(two.pvalue)
    m = len(pvals)
    combined = min(1.0, m * min(pvals))
    detectable = min_detectable_tv(n, alpha, power, n_tests=m)
    need = min_tokens_for_tv(target_tv, alpha, power, n_tests=m)

    def out(verdict: Verdict, reason: str) -> DistributionVerdict:
        return DistributionVerdict(
            verdict=verdict,
            reason=reason,
            n_tokens=n,
            pvalue=combined,
            alpha=alpha,
            power=power,
            n_tests=m,
            detectable_tv=detectable,
            target_tv=target_tv,
            min_tokens=need,
            method=mt,
            baseline=bt,
            two_sample=two,
        )

    if n == 0:
        return out("not shown equivalent", "no sampled tokens")
    if bt is not None and bt.n > 0 and bt.pvalue <= alpha:
        assert two is not None
        p2 = min(1.0, m * two.pvalue)
        if p2 <= alpha:
            return out(
                "divergent",
                f"method differs from the baseline's samples (two-sample p={p2:.3g}); "
                f"the baseline itself fails the PIT test (p={bt.pvalue:.3g}), so the scorer is suspect",
            )
        return out(
            "not shown equivalent",
            f"the baseline's own samples fail the PIT test (p={bt.pvalue:.3g}): "
            "the scorer does not reproduce the engine's sampling; one-sample tests not trusted",
        )
    if combined <= alpha:
        return out(
            "divergent", f"PIT uniformity rejected: p={combined:.3g} <= alpha={alpha:g} over {n} tokens"
        )
    if detectable > target_tv:
        return out(
            "not shown equivalent",
            f"not rejected (p={combined:.3g}) but {n} tokens only detect a "
            f"per-token TV of {detectable:.3f} > {target_tv:g}; need >= {need} tokens",
        )
    return out(
        "equivalent",
        f"not rejected (p={combined:.3g}) over {n} tokens; an aligned per-token TV error "
        f">= {detectable:.3f} would have been detected with power {power:g}",
    )
