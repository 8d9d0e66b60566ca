"""Accuracy aggregation: intervals, pass@k averaging, paired deltas."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.scoring.accuracy import (
    AccuracyEstimate,
    PairedDelta,
    accuracy,
    bootstrap_mean_ci,
    group_scores,
    paired_delta,
    pass_at_k_estimate,
)
from specbench.stats import Estimate, wilson_interval


def test_wilson_known_values():
    # Reference values (Wilson score interval, z = 1.959964).
    lo, hi = wilson_interval(8, 10)
    assert (lo, hi) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(10, 10)
    assert lo == pytest.approx(0.7225, abs=1e-4) and hi == 1.0


@pytest.mark.parametrize(("s", "n"), [(1, 0), (-1, 5), (6, 5)])
def test_wilson_rejects_bad_counts(s, n):
    with pytest.raises(ValueError):
        wilson_interval(s, n)


def test_group_scores_keeps_order_and_samples():
    g = group_scores([("b", True), ("a", False), ("b", False), (3, 1)])
    assert g == {"b": [True, False], "a": [False], "3": [True]}
    assert list(g) == ["b", "a", "3"]


def test_accuracy_single_sample_uses_wilson():
    scores = {f"p{i}": [i < 80] for i in range(100)}
    est = accuracy(scores)
    assert isinstance(est, AccuracyEstimate) and isinstance(est, Estimate)
    assert est.value == pytest.approx(0.8)
    assert est.n == 100 and est.n_samples == 100 and est.method == "wilson"
    assert (est.ci_low, est.ci_high) == pytest.approx(wilson_interval(80, 100))


def test_accuracy_multi_sample_weighs_prompts_equally_and_bootstraps():
    scores = {"a": [True, True, True, True], "b": [False], "c": [True, False]}
    est = accuracy(scores, seed=1)
    assert est.value == pytest.approx((1 + 0 + 0.5) / 3)
    assert est.method == "bootstrap-prompts" and est.n == 3 and est.n_samples == 7
    assert 0.0 <= est.ci_low <= est.value <= est.ci_high <= 1.0
    assert accuracy(scores, seed=1) == est  # seeded: reproducible


def test_accuracy_rejects_empty():
    with pytest.raises(ValueError):
        accuracy({})
    with pytest.raises(ValueError):
        accuracy({"a": []})


def test_bootstrap_ci_covers_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small = rng.random(50) < 0.5
    big = rng.random(5000) < 0.5
    lo_s, hi_s = bootstrap_mean_ci(small, n_boot=2000)
    lo_b, hi_b = bootstrap_mean_ci(big, n_boot=2000)
    assert lo_s <= small.mean() <= hi_s
    assert lo_b <= big.mean() <= hi_b
    assert hi_b - lo_b < hi_s - lo_s


def test_pass_at_k_estimate_averages_tasks():
    scores = {"t1": [True] + [False] * 9, "t2": [False] * 10, "t3": [True] * 10}
    est1 = pass_at_k_estimate(scores, 1)
    assert est1.value == pytest.approx((0.1 + 0 + 1) / 3)
    est5 = pass_at_k_estimate(scores, 5)
    assert est5.value == pytest.approx((0.5 + 0 + 1) / 3)
    assert est5.n == 3 and est5.n_samples == 30
    assert est5.ci_low <= est5.value <= est5.ci_high


def test_pass_at_k_estimate_needs_k_samples():
    with pytest.raises(ValueError):
        pass_at_k_estimate({"t": [True, False]}, 3)


def test_paired_delta_identical_runs_is_exactly_zero():
    scores = {f"p{i}": [i % 3 == 0] for i in range(60)}
    d = paired_delta(scores, scores)
    assert isinstance(d, PairedDelta)
    assert (d.value, d.ci_low, d.ci_high) == (0.0, 0.0, 0.0)
    assert d.n == 60 and d.method == "paired-bootstrap-prompts"


def test_paired_delta_detects_a_clear_improvement_and_is_seeded():
    rng = np.random.default_rng(3)
    base = {f"p{i}": [bool(rng.random() < 0.5)] for i in range(400)}
    # The method fixes 20 % of the baseline's failures and breaks nothing.
    method = {k: [v[0] or bool(rng.random() < 0.2)] for k, v in base.items()}
    d = paired_delta(method, base, seed=7)
    expected = np.mean([method[k][0] - base[k][0] for k in base])
    assert d.value == pytest.approx(expected)
    assert d.ci_low > 0 and d.ci_low <= d.value <= d.ci_high
    assert d.method_value - d.baseline_value == pytest.approx(d.value)
    assert paired_delta(method, base, seed=7) == d


def test_paired_delta_uses_shared_ids_only():
    method = {"a": [True], "b": [True], "only_m": [True]}
    base = {"a": [False], "b": [True], "only_b1": [False], "only_b2": [False]}
    d = paired_delta(method, base)
    assert d.n == 2
    assert d.value == pytest.approx(0.5)
    assert (d.only_in_method, d.only_in_baseline) == (1, 2)
    with pytest.raises(ValueError):
        paired_delta({"x": [True]}, {"y": [True]})


def test_paired_delta_is_paired():
    """Prompts of very different difficulty, the method always +1 on a fixed subset:
    pairing removes the between-prompt variance, so the CI is narrow."""
    base = {f"p{i}": [False] * 4 if i % 2 else [True] * 4 for i in range(200)}
    method = dict(base)
    for i in range(0, 200, 10):
        method[f"p{i + 1}"] = [True] * 4
    d = paired_delta(method, base)
    assert d.value == pytest.approx(20 / 200)
    assert d.ci_high - d.ci_low < 0.12
    assert d.model_dump()["n"] == 200


def test_all_failed_prompts_get_a_wilson_interval_not_zero_width():
    # pass@1 at T=0.5 on 4 prompts × 4 samples, all wrong: not "0.0 % [0.0, 0.0]".
    scores = {f"p{i}": [False] * 4 for i in range(4)}
    est = accuracy(scores)
    lo, hi = wilson_interval(0, 4)
    assert (est.value, est.ci_low, est.ci_high, est.method, est.n) == (0.0, 0.0, hi, "wilson-prompts", 4)
    assert lo == 0.0 and hi > 0.4
    assert pass_at_k_estimate(scores, 1).ci_high == hi
    assert accuracy({f"p{i}": [True] * 2 for i in range(3)}).ci_low == wilson_interval(3, 3)[0]
