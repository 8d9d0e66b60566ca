"""A bootstrap's ``batched`` statistic (all resamples of a block at once) must give the very numbers its
scalar statistic gives one resample at a time: the intervals of a summary do not depend on it, only the
time analysis takes (the main job's 13 s → 4 s)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from support.paths import RECORDED

from specbench import api, stats


@pytest.mark.parametrize("n", [2, 3, 7, 8, 9, 33, 129, 300])
def test_ratio_and_mean_intervals_equal_the_scalar_bootstrap(n: int) -> None:
    rng = np.random.default_rng(n)
    num = rng.integers(0, 60, n).astype(float)  # accepted tokens per request
    den = rng.integers(0, 20, n).astype(float)  # drafts per request (some 0: NaN resamples dropped)
    den[0] = 0.0
    pairs = np.column_stack([num, den])
    assert stats.ratio_ci(num, den) == stats.bootstrap(pairs, stats._ratio)
    latency = rng.gamma(2.0, 0.37, n)
    assert stats.mean_ci(latency) == stats.bootstrap(latency, lambda a: float(np.mean(a)))


def test_every_batched_bootstrap_of_an_analysis_equals_its_scalar_one(tmp_path: Path, monkeypatch) -> None:
    """``analyze`` of a recorded run with each bootstrap computed both ways (τ, acceptance, means,
    the paired speedup over the baseline)."""
    scalar = stats.bootstrap
    seen = []

    def both(units, statistic, **kw):
        batched = kw.pop("batched", None)
        want = scalar(units, statistic, **kw)
        if batched is not None:
            assert scalar(units, statistic, batched=batched, **kw) == want
            seen.append(statistic)
        return want

    monkeypatch.setattr(stats, "bootstrap", both)
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    api.analyze(run)
    # τ and acceptance (Σ/Σ), means, and the paired speedup (metrics.paired_speedup's ratio)
    assert {f.__qualname__ for f in seen} >= {"_ratio", "mean_ci.<locals>.<lambda>", "paired_speedup.<locals>.ratio"}


@pytest.mark.parametrize("sizes", [(4, 4, 4, 4), (3, 5, 2), (8, 1)])
def test_round_bootstrap_batched_equals_scalar(sizes: tuple[int, ...]) -> None:
    """Rounds of equal and unequal sizes (resamples of several pooled sizes), with a zero denominator."""
    rng = np.random.default_rng(sum(sizes))
    rounds = [np.column_stack([rng.integers(0, 60, k), rng.integers(0, 4, k)]).astype(float) for k in sizes]
    assert stats.round_bootstrap(rounds, stats._ratio, batched=stats._ratios) == stats.round_bootstrap(
        rounds, stats._ratio)
