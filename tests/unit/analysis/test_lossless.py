"""Unit tests for specbench.analysis.lossless on hand-built distributions with known answers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specbench.analysis.lossless_greedy import (
    DEFAULT_TIE_TOLERANCE,
    GreedyComparison,
    compare_greedy,
    summarize_greedy,
)
from specbench.analysis.lossless_sampled import (
    coarsen_topk,
    distribution_verdict,
    false_alarm_pvalue,
    pit_values,
    pit_values_array,
    topk_arrays,
    two_sample_test,
    uniformity_test,
)
from specbench.stats import min_detectable_tv, min_tokens_for_tv, wilson_interval

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def random_dists(rng: np.random.Generator, n: int, vocab: int, scale: float = 2.0) -> np.ndarray:
    logits = scale * rng.standard_normal((n, vocab))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def sample_rows(rng: np.random.Generator, p: np.ndarray) -> np.ndarray:
    c = np.cumsum(p, axis=1)
    u = rng.random(len(p)) * c[:, -1]
    return np.minimum((c < u[:, None]).sum(axis=1), p.shape[1] - 1)


def softmax_t(p: np.ndarray, temperature: float) -> np.ndarray:
    z = np.log(p) / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def lp(x: float) -> float:
    return math.log(x)


# ---------------------------------------------------------------------------
# Wilson interval, binomial false-alarm check
# ---------------------------------------------------------------------------


def test_wilson_known_values() -> None:
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4)
    assert hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0
    assert hi == pytest.approx(1.959964**2 / (10 + 1.959964**2), abs=1e-6)  # 0.2775
    lo, hi = wilson_interval(100, 100)
    assert hi == 1.0
    assert lo == pytest.approx(0.9630, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("k,n", [(1, 7), (13, 40), (99, 100), (250, 1000), (3, 3)])
def test_wilson_matches_scipy(k: int, n: int) -> None:
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.9, method="wilson")
    lo, hi = wilson_interval(k, n, confidence=0.9)
    assert lo == pytest.approx(ci.low, abs=1e-9)
    assert hi == pytest.approx(ci.high, abs=1e-9)


def test_wilson_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
    with pytest.raises(ValueError):
        wilson_interval(1, 2, confidence=1.0)


def test_false_alarm_pvalue() -> None:
    assert false_alarm_pvalue(0, 100, 0.01) == pytest.approx(1.0)
    assert false_alarm_pvalue(5, 100, 0.01) == pytest.approx(stats.binom.sf(4, 100, 0.01))
    assert false_alarm_pvalue(1, 100, 0.01) > 0.5  # one false alarm in 100 at 1%: fine
    assert false_alarm_pvalue(8, 100, 0.01) < 1e-4  # eight: the test is anti-conservative
    with pytest.raises(ValueError):
        false_alarm_pvalue(3, 2, 0.01)


# ---------------------------------------------------------------------------
# Greedy identity
# ---------------------------------------------------------------------------


def test_identical() -> None:
    r = compare_greedy([1, 2, 3], [1, 2, 3])
    assert r.identical and r.kind == "identical" and r.first_divergence is None


def test_near_tie_and_divergent_with_logprobs() -> None:
    base = [5, 6, 7]
    logprobs = [{5: -0.1}, {6: lp(0.45), 9: lp(0.45) - 5e-4, 2: lp(0.05)}, {7: -0.2}]
    tie = compare_greedy(base, [5, 9, 1], logprobs)
    assert tie.kind == "near_tie" and not tie.identical
    assert tie.first_divergence == 1 and tie.method_token == 9 and tie.baseline_token == 6
    assert tie.logprob_gap == pytest.approx(5e-4) and not tie.gap_is_bound
    div = compare_greedy(base, [5, 2, 1], logprobs)
    assert div.kind == "divergent" and div.logprob_gap == pytest.approx(math.log(9))
    # a larger tolerance (e.g. bfloat16) turns the same gap into a near-tie
    assert compare_greedy(base, [5, 2, 1], logprobs, tie_tolerance=4.0).kind == "near_tie"


def test_default_tolerance_is_sane() -> None:
    assert 1e-5 < DEFAULT_TIE_TOLERANCE <= 1e-2


def test_method_token_outside_topk() -> None:
    # top-2 recorded; the method's token is outside, so its logprob <= log(0.05): gap >= log(0.9/0.05)
    logprobs = [{1: lp(0.9), 2: lp(0.05)}]
    r = compare_greedy([1], [3], logprobs)
    assert r.kind == "divergent" and r.gap_is_bound and r.logprob_gap == pytest.approx(math.log(18))
    # unrecorded mass 0.05 split among outside tokens: also <= log(0.05); here the tail is the
    # tighter bound (recorded min 0.08, tail 0.02)
    r = compare_greedy([1], [3], [{1: lp(0.9), 2: lp(0.08)}])
    assert r.logprob_gap == pytest.approx(math.log(0.9 / 0.02))
    # recorded mass >= 1 (rounding, or not normalised): only the recorded minimum bounds it
    r = compare_greedy([1], [3], [{1: lp(0.9), 2: lp(0.1000001)}])
    assert r.logprob_gap == pytest.approx(math.log(9), rel=1e-5)
    # all recorded tokens within the tolerance: the outside token cannot be bounded away
    tied = [{1: lp(0.3), 2: lp(0.3) - 1e-4}]
    r = compare_greedy([1], [3], tied)
    # ... unless the unrecorded mass (0.4) itself is small enough; here it is not
    assert r.kind == "unverifiable"
    # the tail-mass bound: recorded mass 0.999 leaves <= 0.001 for any other token
    r = compare_greedy([1], [3], [{1: lp(0.4995), 2: lp(0.4995)}])
    assert r.kind == "divergent" and r.gap_is_bound


def test_no_logprobs_is_unverifiable() -> None:
    assert compare_greedy([1, 2], [1, 3]).kind == "unverifiable"
    assert compare_greedy([1, 2], [1, 3], [{1: -0.1}]).kind == "unverifiable"  # too short
    assert compare_greedy([1, 2], [1, 3], [{1: -0.1}, {}]).kind == "unverifiable"  # empty


def test_string_keys_accepted() -> None:
    from_json: list[Any] = [{"1": -0.1}, {"2": -0.7, "4": -0.7004}]  # JSON turns int keys into str
    r = compare_greedy([1, 2], [1, 4], from_json)
    assert r.kind == "near_tie"


def test_method_stopped_early() -> None:
    # method is a strict prefix: divergence at min length
    confident = [{1: -0.01}, {2: -0.01}, {3: -0.01, 0: -6.0}]
    r = compare_greedy([1, 2, 3], [1, 2], confident)
    assert r.first_divergence == 2 and r.method_token is None and r.baseline_token == 3
    assert r.kind == "divergent" and r.gap_is_bound
    # baseline was torn between continuing and EOS (0): cannot tell which the method picked
    torn = [{1: -0.01}, {2: -0.01}, {3: lp(0.5), 0: lp(0.5) - 1e-5}]
    assert compare_greedy([1, 2, 3], [1, 2], torn).kind == "unverifiable"


def test_baseline_stopped_early() -> None:
    r = compare_greedy([1, 2], [1, 2, 3], [{1: -0.01}, {2: -0.01}])
    assert r.first_divergence == 2 and r.baseline_token is None and r.kind == "unverifiable"
    # with an entry recorded at the stop position (the EOS 0 was the top choice)
    r = compare_greedy([1, 2], [1, 2, 3], [{1: -0.01}, {2: -0.01}, {0: -0.1, 3: -2.4}])
    assert r.kind == "divergent" and r.logprob_gap == pytest.approx(2.3)


def test_empty_sequences() -> None:
    assert compare_greedy([], []).kind == "identical"
    assert compare_greedy([], [1]).first_divergence == 0


def test_summarize_greedy_verdicts() -> None:
    ident = GreedyComparison(True, None, "identical")
    tie = GreedyComparison(False, 3, "near_tie")
    div = GreedyComparison(False, 1, "divergent")
    unv = GreedyComparison(False, 2, "unverifiable")
    s = summarize_greedy([ident] * 9 + [tie])
    assert s.verdict == "equivalent" and s.n == 10 and s.n_near_tie == 1
    assert s.match_rate == pytest.approx(0.9) and s.consistent_rate == pytest.approx(1.0)
    assert s.match_ci == pytest.approx(wilson_interval(9, 10))
    assert s.match.value == pytest.approx(0.9) and s.match.n == 10 and s.match.method == "wilson"
    assert s.consistent.ci_high == 1.0
    s = summarize_greedy([ident, unv, tie])
    assert s.verdict == "not shown equivalent" and s.unverifiable_indices == (1,)
    s = summarize_greedy([ident, unv, div])
    assert s.verdict == "divergent" and s.divergent_indices == (2,)
    s = summarize_greedy([])
    assert s.verdict == "not shown equivalent" and math.isnan(s.match_rate) and s.match_ci == (0.0, 1.0)
    assert s.match.value is None and s.match.n == 0


# ---------------------------------------------------------------------------
# PIT: exactness, coarsening, layout
# ---------------------------------------------------------------------------


def test_pit_exact_sampler_uniform() -> None:
    rng = np.random.default_rng(0)
    p = random_dists(rng, 20000, 50)
    tok = sample_rows(rng, p)
    ids, lps = coarsen_topk(p, 50)  # full distribution, no tail
    u = pit_values_array(tok, ids, lps, rng)
    assert u.min() >= 0 and u.max() <= 1
    assert uniformity_test(u).pvalue > 1e-3
    u_id = pit_values_array(tok, ids, lps, rng, order="token_id")
    assert uniformity_test(u_id).pvalue > 1e-3


def test_pit_topk_tail_exact() -> None:
    """Tokens drawn from the full distribution, scored with top-k + tail: still uniform."""
    rng = np.random.default_rng(1)
    p = random_dists(rng, 20000, 400, scale=1.0)  # flat: the tail carries much of the mass
    tok = sample_rows(rng, p)
    ids, lps = coarsen_topk(p, 5)
    tail = 1 - np.exp(lps).sum(axis=1)
    assert tail.mean() > 0.5
    assert (~(ids == tok[:, None]).any(axis=1)).mean() > 0.5  # most tokens fall in the tail
    u = pit_values_array(tok, ids, lps, rng)
    assert uniformity_test(u).pvalue > 1e-3


def test_exact_sampler_rejection_rate_is_alpha() -> None:
    """Across many seeds an exact sampler is rejected about alpha of the time, no more."""
    runs, n, alpha = 400, 200, 0.05
    rng = np.random.default_rng(2)
    p = random_dists(rng, runs * n, 30)
    tok = sample_rows(rng, p)
    ids, lps = coarsen_topk(p, 4)
    u = pit_values_array(tok, ids, lps, rng).reshape(runs, n)
    k = sum(uniformity_test(x).pvalue <= alpha for x in u)
    assert false_alarm_pvalue(k, runs, alpha) > 1e-3
    assert k >= 3  # Bonferroni is conservative, not blind: 20 expected at 0.05, ~<= 20


def test_wrong_temperature_rejected() -> None:
    rng = np.random.default_rng(3)
    p = random_dists(rng, 4000, 100)
    tok = sample_rows(rng, softmax_t(p, 1.1))  # sampler 10% hotter than the scorer
    ids, lps = coarsen_topk(p, 20)
    u = pit_values_array(tok, ids, lps, rng)
    assert uniformity_test(u).pvalue < 1e-4
    assert distribution_verdict(u).verdict == "divergent"


def test_zero_probability_entries() -> None:
    """-inf logprobs (top-p filtered) are categories of mass 0; sampling one is visible."""
    p = np.array([[0.6, 0.4, 0.0, 0.0]] * 3000)
    ids, lps = coarsen_topk(p, 4)
    assert np.isneginf(lps[:, 2:]).all()
    rng = np.random.default_rng(4)
    tok = sample_rows(rng, p)
    assert uniformity_test(pit_values_array(tok, ids, lps, rng)).pvalue > 1e-3
    u = pit_values_array(np.full(5, 3), ids[:5], lps[:5], rng)
    assert np.allclose(u, 1.0)  # a token of probability 0 sits at the top edge


def test_pit_dict_path_matches_array_path() -> None:
    rng = np.random.default_rng(5)
    p = random_dists(rng, 300, 40)
    tok = sample_rows(rng, p)
    ids, lps = coarsen_topk(p, 6)
    dists = [
        {int(i): float(v) for i, v in zip(r_ids, r_lps, strict=True)}
        for r_ids, r_lps in zip(ids, lps, strict=True)
    ]
    a = pit_values(tok.tolist(), dists, rng=7)
    b = pit_values_array(tok, ids, lps, rng=np.random.default_rng(7))
    np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(a, pit_values(tok.tolist(), dists, rng=7))  # deterministic given a seed


def test_vllm_appended_sampled_token_is_cut() -> None:
    """vLLM adds the sampled token to the top-k when it is outside: k+1 entries.

    Keeping that entry makes the partition depend on the outcome and biases the
    PIT; ``topk_arrays(k=None)`` cuts every position to the smallest size.
    """
    rng = np.random.default_rng(6)
    k, n = 3, 6000
    p = random_dists(rng, n, 60, scale=0.5)
    tok = sample_rows(rng, p)
    ids, lps = coarsen_topk(p, k)
    logp = np.log(p)
    dists = []
    for i in range(n):
        d = {int(t): float(v) for t, v in zip(ids[i], lps[i], strict=True)}
        d.setdefault(int(tok[i]), float(logp[i, tok[i]]))
        dists.append(d)
    assert {len(d) for d in dists} == {k, k + 1}
    ok = pit_values(tok.tolist(), dists, rng=1)
    assert uniformity_test(ok).pvalue > 1e-3
    biased = pit_values(tok.tolist(), dists, rng=1, k=k + 1)
    assert uniformity_test(biased).pvalue < 1e-6


def test_topk_arrays_layout() -> None:
    ids, lps = topk_arrays([{3: -1.0, 1: -0.5, 2: -1.0}, {7: -0.1}], k=3)
    assert ids.tolist() == [[1, 2, 3], [7, -1, -1]]
    assert lps[0].tolist() == [-0.5, -1.0, -1.0] and np.isneginf(lps[1, 1:]).all()
    ids, _ = topk_arrays([{3: -1.0, 1: -0.5, 2: -1.0}, {7: -0.1, 8: -3}])
    assert ids.tolist() == [[1, 2], [7, 8]]  # k inferred as the smallest size
    with pytest.raises(ValueError):
        topk_arrays([{1: -0.1}, {}])


def test_pit_validation() -> None:
    ids = np.array([[0, 1]])
    with pytest.raises(ValueError, match="sum"):
        pit_values_array([0], ids, np.log([[0.7, 0.7]]), 0)
    with pytest.raises(ValueError, match="duplicate"):
        pit_values_array([0], np.array([[1, 1]]), np.log([[0.2, 0.2]]), 0)
    with pytest.raises(ValueError):
        pit_values_array([0, 1], ids, np.log([[0.5, 0.5]]), 0)
    with pytest.raises(ValueError):
        pit_values([0], [{0: -0.1}, {0: -0.1}], 0)
    assert pit_values([], [], 0).size == 0


def test_pit_tiny_rounding_renormalised() -> None:
    # token 0 is the less likely of two: its PIT interval is [0.5, 1] after renormalising
    u = pit_values_array([0], np.array([[0, 1]]), np.log([[0.5, 0.5000004]]), 0)
    assert 0.4999 < u[0] <= 1.0


def _reference_pit(tok: int, d: dict[int, float], v: float) -> float:
    items = sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))
    before = 0.0
    for t, lpv in items:
        if t == tok:
            return before + v * math.exp(lpv)
        before += math.exp(lpv)
    return before + v * max(0.0, 1.0 - before)


@settings(max_examples=60, deadline=None)
@given(
    weights=st.lists(st.floats(0.01, 10.0), min_size=2, max_size=12),
    k=st.integers(1, 12),
    token=st.integers(0, 11),
    seed=st.integers(0, 2**32 - 1),
)
def test_pit_matches_reference(weights: list[float], k: int, token: int, seed: int) -> None:
    w = np.array(weights)
    p = (w / w.sum())[None, :]
    ids, lps = coarsen_topk(p, k)
    d = {int(i): float(v) for i, v in zip(ids[0], lps[0], strict=True)}
    token = token % len(weights)
    u = pit_values([token], [d], rng=seed)
    v = np.random.default_rng(seed).random(1)[0]
    assert u[0] == pytest.approx(_reference_pit(token, d, v), abs=1e-12)
    assert 0.0 <= u[0] <= 1.0


# ---------------------------------------------------------------------------
# Tests on PIT values, detectable TV, verdicts
# ---------------------------------------------------------------------------


def test_uniformity_test_basics() -> None:
    grid = (np.arange(1000) + 0.5) / 1000
    t = uniformity_test(grid)
    assert t.n == 1000 and t.bins == 20 and t.n_tests == 2 and t.pvalue == 1.0
    bad = uniformity_test(np.full(1000, 0.3))
    assert bad.pvalue < 1e-10 and bad.statistic == pytest.approx(0.7)
    tiny = uniformity_test([0.1, 0.5, 0.9])
    assert tiny.n_tests == 1 and math.isnan(tiny.chi2_pvalue) and tiny.pvalue == tiny.ks_pvalue
    assert uniformity_test([]).pvalue == 1.0
    with pytest.raises(ValueError):
        uniformity_test([0.5, 1.5])
    ks = stats.kstest(grid**1.1, "uniform")
    assert uniformity_test(grid**1.1).ks_pvalue == pytest.approx(ks.pvalue)


def test_two_sample() -> None:
    rng = np.random.default_rng(8)
    same = two_sample_test(rng.random(2000), rng.random(2000))
    assert same.pvalue > 1e-3 and same.n_method == 2000
    shifted = two_sample_test(rng.random(2000) ** 1.3, rng.random(2000))
    assert shifted.pvalue < 1e-6
    assert two_sample_test([], [0.5]).pvalue == 1.0


def test_min_detectable_tv_values() -> None:
    assert min_detectable_tv(1000) == pytest.approx(0.0933, abs=5e-4)
    vals = [min_detectable_tv(n) for n in (50, 100, 1000, 10000)]
    assert all(a > b for a, b in zip(vals, vals[1:], strict=False))
    assert min_detectable_tv(0) == math.inf
    assert min_detectable_tv(1000, n_tests=3) > min_detectable_tv(1000, n_tests=2)
    n = min_tokens_for_tv(0.1)
    assert min_detectable_tv(n) <= 0.1 < min_detectable_tv(n - 1)


def test_min_detectable_tv_is_met_by_aligned_shift() -> None:
    """An aligned error of size delta*(n) is detected with >= 95% power (bound is sufficient)."""
    n, runs = 400, 200
    delta = min_detectable_tv(n)
    rng = np.random.default_rng(9)
    # PIT density: mass 0.5 - delta on [0, 0.5), 0.5 + delta on [0.5, 1): sup|G - t| = delta
    low = rng.random((runs, n)) < 0.5 - delta
    u = np.where(low, 0.5 * rng.random((runs, n)), 0.5 + 0.5 * rng.random((runs, n)))
    power = np.mean([uniformity_test(x).pvalue <= 0.01 for x in u])
    assert power >= 0.95


def test_verdict_equivalent_and_not_shown() -> None:
    rng = np.random.default_rng(10)
    v = distribution_verdict(rng.random(3000), rng.random(3000))
    assert v.verdict == "equivalent" and v.n_tests == 3
    assert v.detectable_tv == pytest.approx(min_detectable_tv(3000, n_tests=3))
    assert v.detectable_tv < v.target_tv and v.min_tokens <= 3000
    few = distribution_verdict(rng.random(200))
    assert few.verdict == "not shown equivalent" and "need" in few.reason
    assert distribution_verdict([]).verdict == "not shown equivalent"


def test_verdict_divergent() -> None:
    rng = np.random.default_rng(11)
    v = distribution_verdict(rng.random(3000) ** 1.3, rng.random(3000))
    assert v.verdict == "divergent" and v.pvalue <= 0.01
    # a rejection is valid evidence even below the size needed to claim equivalence
    assert distribution_verdict(np.full(100, 0.99)).verdict == "divergent"


def test_verdict_with_broken_scorer() -> None:
    """If the baseline's own samples fail the PIT test, trust only the two-sample test."""
    rng = np.random.default_rng(12)
    skew = 1.3  # the scorer mis-models the engine: neither sample is uniform
    base, same = rng.random(3000) ** skew, rng.random(3000) ** skew
    v = distribution_verdict(same, base)
    assert v.verdict == "not shown equivalent" and "baseline" in v.reason
    assert v.method.pvalue <= 0.01  # the one-sample test would have (wrongly) said divergent
    worse = distribution_verdict(rng.random(3000) ** 2.0, base)
    assert worse.verdict == "divergent" and "two-sample" in worse.reason
