import numpy as np

from specbench import stats


def test_wilson_known_values():
    e = stats.wilson(8, 10)
    # Reference: Wilson 95% for 8/10 is [0.490, 0.943].
    assert abs(e.ci_low - 0.4902) < 1e-3 and abs(e.ci_high - 0.9433) < 1e-3 and e.n == 10
    assert stats.wilson(0, 0).value is None


def test_bootstrap_is_seeded_and_covers_mean():
    x = np.random.default_rng(0).normal(10, 1, size=200)
    a, b = stats.mean_ci(list(x)), stats.mean_ci(list(x))
    assert a == b and a.ci_low < 10 < a.ci_high and a.n == 200


def test_ratio_ci_constant_ratio_has_zero_width():
    e = stats.ratio_ci([2, 4, 6], [1, 2, 3])
    assert e.value == 2 and e.ci_low == 2 and e.ci_high == 2


def test_t_interval_and_significance():
    e = stats.t_interval([1.0, 2.0, 3.0])
    assert e.value == 2.0 and e.ci_low < 2 < e.ci_high and e.method == "t"
    lo = stats.Estimate(value=1, ci_low=0.9, ci_high=1.1, n=5)
    hi = stats.Estimate(value=2, ci_low=1.9, ci_high=2.1, n=5)
    assert stats.significant_change(lo, hi) and not stats.significant_change(lo, lo)


def test_estimate_format():
    assert stats.Estimate(value=2.345, ci_low=2.1, ci_high=2.5, n=3).fmt() == "2.35 [2.10, 2.50]"
    assert stats.Estimate(value=None).fmt() == "–"


def test_wilson_ends_are_exact():
    assert stats.wilson(0, 7).ci_low == 0.0
    assert stats.wilson(10, 10).ci_high == 1.0
    assert stats.wilson_interval(0, 0) == (0.0, 1.0)


def test_bootstrap_blocks_and_vectorized_draw_the_same_resamples(monkeypatch):
    x = np.random.default_rng(3).random(101)
    whole = stats.bootstrap(x, lambda a: float(np.mean(a)), resamples=500)
    vec = stats.bootstrap(x, lambda b: b.mean(axis=1), resamples=500, vectorized=True)
    monkeypatch.setattr(stats, "_BLOCK_ENTRIES", 101 * 7)  # blocks of 7 resamples
    blocked = stats.bootstrap(x, lambda a: float(np.mean(a)), resamples=500)
    assert whole == vec == blocked


def test_bootstrap_two_sample():
    a, b = np.arange(1.0, 21.0), np.arange(2.0, 42.0, 2.0)
    e = stats.bootstrap_two_sample(a, b, lambda x, y: y.mean(axis=-1) / x.mean(axis=-1))
    assert e.value == 2.0 and e.ci_low < 2.0 < e.ci_high and e.n == 20 and e.method == "bootstrap"
    assert stats.bootstrap_two_sample(a[:1], b, lambda x, y: y.mean(axis=-1)).ci_low is None
    assert stats.bootstrap_two_sample(a[:0], b, lambda x, y: y.mean(axis=-1)).value is None
