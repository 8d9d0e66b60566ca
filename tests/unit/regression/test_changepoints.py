"""Step detection (pure): steps found where they are, none in noise or at one odd run."""

from __future__ import annotations

import numpy as np
import pytest

from specbench.regression.changepoints import current_step, detect_steps, noise_sigma


@pytest.mark.parametrize("seed", range(5))
def test_one_step_is_found_at_its_first_run(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = list(2.5 + 0.02 * rng.standard_normal(15)) + list(2.25 + 0.02 * rng.standard_normal(6))
    steps = detect_steps(y)
    assert [s.index for s in steps] == [15]
    assert steps[0].before == pytest.approx(2.5, abs=0.03) and steps[0].after == pytest.approx(2.25, abs=0.03)
    assert current_step(y) == steps[0]
    assert current_step(y, higher_is_better=False) is None  # lower latency is no regression


@pytest.mark.parametrize("seed", range(10))
def test_noise_alone_has_no_step(seed: int) -> None:
    y = 2.5 + 0.05 * np.random.default_rng(100 + seed).standard_normal(30)
    assert detect_steps(list(y)) == []


def test_one_odd_run_inside_the_series_is_not_a_step() -> None:
    y = [2.5, 2.51, 2.49, 2.5, 2.2, 2.5, 2.49, 2.51, 2.5, 2.5]
    assert detect_steps(y) == []


def test_deterministic_values_use_the_runs_own_intervals() -> None:
    # greedy τ repeats exactly: the spread is 0, the runs' intervals set the noise
    y = [2.85] * 5 + [2.565]
    assert noise_sigma(y, [0.06] * 6) == pytest.approx(0.06 / 1.96)
    assert [s.index for s in detect_steps(y, [0.06] * 6)] == [5]
    assert detect_steps([2.85] * 5 + [2.84], [0.06] * 6) == []  # within the runs' own noise


def test_two_steps_and_short_series() -> None:
    y = [1.0] * 8 + [1.5] * 8 + [1.2] * 8
    assert [s.index for s in detect_steps(y, [0.02] * 24)] == [8, 16]
    assert detect_steps([1.0]) == [] and detect_steps([]) == []
