"""Issue 22: the drift-aware speed interval, the A/A noise calibration and the gate's speed verdicts
(hand-built summaries: a stored fixture with its speed numbers moved as a drifting machine would)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from support.factories import stored_summary

from specbench.regression.calibrate_noise import (
    aa_noise_calibration,
    detectable_drop_pct,
    floor_for_power,
    relative_changes,
)
from specbench.regression.gate import NOT_GATED, evaluate_gate
from specbench.regression.gate_rules import GateRules
from specbench.regression.run_diff import bonferroni_widen, metric_change
from specbench.results.noise_calibration import NoiseError, load_noise, save_noise
from specbench.results.summary import RunSummary
from specbench.stats import Estimate, bootstrap, round_bootstrap

RULES = GateRules.model_validate({"rules": {"equivalence": None}})


def drifted(factor_of: dict[str, float] | float, run_id: str) -> RunSummary:
    """The fixture run with each group's speed (speedup, output tok/s) scaled and its own narrow interval kept:
    what a rerun on a busier or quieter machine looks like."""
    s = stored_summary()
    s.run_id = run_id
    for g in s.groups:
        f = factor_of if isinstance(factor_of, float) else factor_of.get(g.group_id, 1.0)
        for name in ("speedup", "output_tps"):
            e: Estimate | None = getattr(g, name)
            if e is not None and e.value is not None and e.ci_low is not None and e.ci_high is not None:
                setattr(g, name, e.model_copy(update={"value": e.value * f, "ci_low": e.ci_low * f,
                                                      "ci_high": e.ci_high * f}))
    return s


def aa_runs(n: int, spread: float, seed: int) -> list[RunSummary]:
    rng = np.random.default_rng(seed)
    gids = [g.group_id for g in stored_summary().groups]
    return [drifted({gid: float(1 + rng.normal(0, spread)) for gid in gids}, f"aa{i}") for i in range(n)]


# -- the interval --------------------------------------------------------------------------------


def _ratio(a: np.ndarray) -> float:
    return float(a[:, 0].sum() / a[:, 1].sum())


def test_one_round_is_the_plain_bootstrap() -> None:
    rows = np.column_stack([np.arange(1, 21, dtype=float), np.ones(20)])
    one = round_bootstrap([rows], _ratio)
    plain = bootstrap(rows, _ratio)
    assert (one.value, one.ci_low, one.ci_high, one.n) == (plain.value, plain.ci_low, plain.ci_high, plain.n)
    assert one.rounds == 1


def test_drift_between_rounds_widens_the_interval() -> None:
    rng = np.random.default_rng(0)
    per_round = [np.column_stack([rng.normal(10, 0.2, 12), np.ones(12)]) for _ in range(4)]
    steady = round_bootstrap(per_round, _ratio)
    drift = [r * np.array([[f, 1.0]]) for r, f in zip(per_round, (0.9, 1.1, 0.95, 1.05), strict=True)]
    moved = round_bootstrap(drift, _ratio)
    assert steady.rounds == moved.rounds == 4 and moved.n == 48 and moved.method == "round bootstrap"
    assert steady.ci_low is not None and steady.ci_high is not None
    assert moved.ci_low is not None and moved.ci_high is not None
    # The same 48 prompts' spread; rounds ±10 % apart: the round interval is several times wider.
    assert (moved.ci_high - moved.ci_low) > 3 * (steady.ci_high - steady.ci_low)
    # …and wider than an interval that pools the rounds as if they were one.
    pooled = bootstrap(np.concatenate(drift), _ratio)
    assert pooled.ci_low is not None and pooled.ci_high is not None
    assert (moved.ci_high - moved.ci_low) > 1.5 * (pooled.ci_high - pooled.ci_low)
    assert round_bootstrap([], _ratio).value is None


# -- calibration ---------------------------------------------------------------------------------


def test_calibration_is_the_95th_percentile_change_over_root_two() -> None:
    runs = aa_runs(4, 0.03, seed=1)
    cal = aa_noise_calibration(runs, "cpu-2c")
    changes = relative_changes(runs, "speedup")
    speed_groups = sum(1 for g in runs[0].groups if g.speedup is not None and g.speedup.value is not None)
    assert len(changes) == 6 * speed_groups  # 6 pairs of 4 runs
    assert cal.metrics["speedup"].noise_floor_pct == pytest.approx(100 * np.quantile(changes, 0.95) / math.sqrt(2),
                                                                   abs=1e-3)
    assert cal.metrics["speedup"].pairs == 6 and set(cal.metrics) >= {"speedup", "output_tps"}
    assert cal.floor_pct("speedup") == cal.metrics["speedup"].noise_floor_pct and cal.floor_pct("tau") is None
    with pytest.raises(NoiseError):
        aa_noise_calibration(runs[:1], "cpu-2c")


def test_calibration_round_trips_through_its_file(tmp_path: Path) -> None:
    cal = aa_noise_calibration(aa_runs(3, 0.02, seed=2), "cpu-2c")
    save_noise(cal, tmp_path / "noise.json")
    assert load_noise(tmp_path / "noise.json") == cal
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(NoiseError, match="not a noise calibration"):
        load_noise(tmp_path / "bad.json")


# -- gate verdicts -------------------------------------------------------------------------------


def test_identical_code_on_a_drifting_machine_is_not_failed_without_a_noise_estimate() -> None:
    old, new = stored_summary(), drifted(0.90, "rerun")  # −10 %: the A/A move, intervals ±1 %
    r = evaluate_gate(new, old, RULES)
    assert r.exit_code == 0 and not r.failures
    assert any(w.startswith(NOT_GATED) for w in r.warnings)
    assert not any(c.metric == "speedup" for c in r.checks)  # not tested at all, not "passed"
    # The same pair with an explicit floor that is too small for this drift: the gate tests and fails.
    tight = GateRules.model_validate({"rules": {"equivalence": None, "speedup": {"max_drop_pct": 5,
                                                                                  "noise_floor_pct": 1}}})
    assert evaluate_gate(new, old, tight).exit_code == 1


def test_a_calibration_passes_identical_code_and_catches_a_planted_slowdown() -> None:
    calibration, judged = aa_runs(4, 0.03, seed=3), aa_runs(4, 0.03, seed=4)  # calibrated on other runs
    cal = aa_noise_calibration(calibration, "cpu-2c")
    for i, a in enumerate(judged):
        for b in judged[i + 1:]:
            r = evaluate_gate(b, a, RULES, noise=cal)
            assert r.exit_code == 0, [c.message for c in r.failures]
            assert any(c.metric == "speedup" and "noise floor" in c.message for c in r.checks)
    eagle = {g.group_id: 0.75 for g in stored_summary().groups if g.method == "eagle3"}  # a real 25 % slowdown of one method
    r = evaluate_gate(drifted(eagle, "slow"), stored_summary(), RULES, noise=cal)
    assert r.exit_code == 1
    assert {c.group_id.split("/")[1] for c in r.failures} == {"eagle3"}
    # The gate says what its floor lets it see: the drop caught in 90 % of reruns at its multiplicity.
    floor = cal.floor_pct("speedup")
    assert floor is not None
    (note,) = [n for n in r.notes if n.startswith("speedup:")]
    drop = detectable_drop_pct(floor, r.widen)
    assert drop is not None and f"a drop of about {drop:.0f} % or more" in note and f"×{r.widen:.2f}" in note
    assert not evaluate_gate(drifted(0.9, "x"), stored_summary(), RULES).notes  # speed not gated: nothing to say


def test_history_window_baselines_need_no_calibration() -> None:
    from specbench.regression.gate_baseline import ExpectedMetric, ExpectedValues

    g = next(g for g in stored_summary().groups if g.speedup is not None and g.speedup.value is not None)
    assert g.speedup is not None and g.speedup.value is not None
    v = g.speedup.value
    window = ExpectedValues(groups={g.group_id: {"speedup": ExpectedMetric(value=v, ci_low=0.9 * v, ci_high=1.1 * v)}})
    r = evaluate_gate(drifted(0.95, "x"), window, RULES)  # inside the window's MAD band: tested, passes
    assert r.exit_code == 0 and any(c.metric == "speedup" for c in r.checks)
    assert not any(w.startswith(NOT_GATED) for w in r.warnings)


@pytest.mark.parametrize("m", [1, 153])
def test_floor_for_power_gives_the_asked_power_through_the_gates_own_test(m):
    """At the floor it names, the gate's difference test (run_diff.metric_change, intervals ±floor widened
    for m comparisons) catches a 15 % drop in 90 % of simulated pairs whose values move by the noise that
    floor stands for (sd floor / 1.96); at twice that floor far fewer."""
    widen = bonferroni_widen(m)
    rng = np.random.default_rng(0)

    def caught(floor_pct: float, n: int = 4000) -> float:
        f = floor_pct / 100
        hits = 0
        for e_base, e_new in rng.normal(0, f / 1.96, size=(n, 2)):
            b, v = 1.0 * (1 + e_base), 0.85 * (1 + e_new)
            c = metric_change("speedup", Estimate(value=b, ci_low=b * (1 - f), ci_high=b * (1 + f)),
                              Estimate(value=v, ci_low=v * (1 - f), ci_high=v * (1 + f)), widen)
            hits += int(c is not None and c.diff_high is not None and c.diff_high < 0)
        return hits / n

    floor = floor_for_power(15, widen)
    assert detectable_drop_pct(floor, widen) == pytest.approx(15)  # its inverse
    assert caught(floor) == pytest.approx(0.90, abs=0.025)
    assert caught(2 * floor) < 0.5
    if m == 153:  # the cpu-smoke gate's family (×1.83): a floor of about 4.6 %
        assert floor == pytest.approx(4.6, abs=0.1)


def test_detectable_drop_grows_with_the_floor_and_has_a_limit():
    w = bonferroni_widen(153)
    drops = [detectable_drop_pct(f, w) for f in (1.0, 4.6, 10.0, 20.0)]
    assert all(d is not None for d in drops) and drops == sorted(drops) and drops[1] == pytest.approx(15, abs=0.2)
    assert detectable_drop_pct(400.0, w) is None  # no drop short of everything is caught that often

