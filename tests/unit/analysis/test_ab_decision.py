"""The A/B speed decision rule (specbench.analysis.ab_decision; issue 36).

On block-bootstrap resamples of recorded A/A rounds (per-round B/A of real identical-arm runs, one
condition per fixture: tests/fixtures/ab/aa_rounds.json, the first runner on a shared machine;
aa_rounds_idle.json, ``specbench ab`` invocations of suites/cpu-gate.yaml on an idle one): false *different* ≤ 1 % per group and per method pooled; a planted 10 %
slowdown is called *different* in ≥ 90 % within the round cap rounds_for_power sizes from the group's
spread. Then hand-made cases for every verdict, the direction of each metric, and the round counts.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest
from support.paths import FIXTURES

from specbench.analysis.ab_decision import (
    ABRule,
    block_resample,
    decide,
    decide_pooled,
    decision_path,
    log_ratios,
    pool_rounds,
    regression_sign,
    rounds_for_power,
    simulate,
)

FIXTURE = FIXTURES / "ab" / "aa_rounds.json"
FIXTURE_FILES = (FIXTURE, FIXTURES / "ab" / "aa_rounds_idle.json")
SIMS = 1000
POWER_SIMS = 300  # the sized caps run to thousands of rounds on the recorded spread
MIN_SERIES = 12


def _recorded() -> tuple[list[tuple[str, str, np.ndarray]], list[tuple[str, str, np.ndarray]]]:
    """Per (metric, group) the recorded log B/A rounds, centred (the A/A null imposed: identical arms
    have B/A = 1, so a series' own mean is noise); per (metric, method) its groups' rounds aligned.
    Time per decoding step is left out: on identical arms both take the same steps, so its per-round
    ratio is TPOT's. Each fixture file is its own condition: its series are never joined with another's."""
    single, pooled = [], []
    for path in FIXTURE_FILES:
        s, p = _recorded_in(path)
        single += s
        pooled += p
    return single, pooled


def _recorded_in(path) -> tuple[list[tuple[str, str, np.ndarray]], list[tuple[str, str, np.ndarray]]]:
    series = json.loads(path.read_text())["series"]
    single, pooled = [], []
    tag = path.stem.removeprefix("aa_rounds").lstrip("_") or "shared"
    for metric in ("tpot_s", "output_tps"):
        by_method: dict[str, list[np.ndarray]] = defaultdict(list)
        for group, ratios in series[metric].items():
            if len(ratios) < MIN_SERIES:
                continue
            lr = np.log(np.asarray(ratios, float))
            lr = lr - lr.mean()
            single.append((f"{tag}:{metric}:{group}", metric, lr))
            by_method[group.split("/")[1]].append(lr)
        for method, rounds in by_method.items():
            n = min(r.size for r in rounds)
            if len(rounds) > 1:
                pooled.append((f"{tag}:{metric}:{method} pooled", metric, np.stack([r[:n] for r in rounds])))
    return single, pooled


SINGLE, POOLED = _recorded()


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_the_fixture_holds_real_aa_rounds(path):
    data = json.loads(path.read_text())
    assert data["runs"] and all(r["command"] and r["machine"] and r["recorded"] for r in data["runs"])
    assert sum(len(v) for r in data["runs"] for v in r["ratios"]["tpot_s"].values()) == sum(
        len(v) for v in data["series"]["tpot_s"].values())
    single, pooled = _recorded_in(path)
    assert {m for _, m, _ in single} == {"tpot_s", "output_tps"} and len(single) >= 6 and pooled
    assert data["series"]["step_time_s"]["tiny/eagle3/humaneval/T0/b4"] == data["series"]["tpot_s"][
        "tiny/eagle3/humaneval/T0/b4"]  # identical arms take identical steps
    # real timings: every series moves round to round (nothing synthetic and constant)
    assert all(np.std(lr) > 1e-3 for _, _, lr in single)


@pytest.mark.parametrize("label,metric,lr", SINGLE + POOLED, ids=[s[0] for s in SINGLE + POOLED])
def test_false_alarms_on_resampled_aa_rounds_per_series(label, metric, lr):
    sim = simulate(lr, metric, ABRule(), sims=SIMS, seed=1)
    assert sim.different <= 0.02, f"{label}: {sim}"
    assert sim.same + sim.undecided + sim.improved + sim.different == pytest.approx(1)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_false_alarms_on_resampled_aa_rounds(path):
    """≤ 1 % over every recorded group and method pooled of one condition (each series weighing the same)."""
    single, pooled = _recorded_in(path)
    rates = [simulate(lr, m, ABRule(), sims=SIMS, seed=1).different for _, m, lr in single + pooled]
    assert np.mean(rates) <= 0.01, rates


@pytest.mark.parametrize("label,metric,lr", SINGLE + POOLED, ids=[s[0] for s in SINGLE + POOLED])
def test_power_at_a_planted_10pct_slowdown_within_the_sized_cap(label, metric, lr):
    pooled = pool_rounds(dict(enumerate(lr))) if lr.ndim == 2 else lr
    cap = rounds_for_power(float(np.std(pooled, ddof=1)), ABRule())
    assert cap is not None
    rule = ABRule(max_rounds=max(cap, ABRule().min_rounds))
    sim = simulate(lr, metric, rule, change=0.10, sims=POWER_SIMS, seed=2)
    assert sim.different >= 0.90, f"{label}: cap {cap}, {sim}"
    assert sim.same == 0.0


def test_the_aa_check_can_fail():
    """The false-alarm check above does catch a rule that does not keep its error rate (a fixed-n
    interval at a loose level, looked at after every round from the second)."""
    loose = ABRule(alpha=0.6, min_rounds=2, margin=0.005, planned_rounds=2, student=False)
    rates = [simulate(lr, m, loose, sims=SIMS, seed=1).different for _, m, lr in SINGLE + POOLED]
    assert np.mean(rates) > 0.01


def test_simulate_is_decide_after_every_round():
    """simulate's vectorised sequential runs give the verdicts decide() gives round by round."""
    _, metric, lr = SINGLE[0]
    rule = ABRule(min_rounds=4, max_rounds=16)
    for change in (0.0, 1.0):
        seqs = block_resample(lr, rule.max_rounds, 20, 3, np.random.default_rng(7))
        counts: dict[str, int] = defaultdict(int)
        for s in seqs:
            shifted = s + regression_sign(metric) * math.log1p(change)
            verdict = "undecided"
            for n in range(1, rule.max_rounds + 1):
                verdict = decide(shifted[:n], metric, rule).verdict
                if verdict != "undecided":
                    break
            counts[verdict] += 1
        sim = simulate(lr, metric, rule, change=change, sims=20, block=3, seed=7)
        assert (sim.same, sim.different, sim.improved) == (counts["same"] / 20, counts["different"] / 20,
                                                           counts["improved"] / 20)
        assert counts["different"] > 0 if change else counts["different"] == 0


# ---------------------------------------------------------------------------
# hand-made cases


def _rounds(mean: float, sd: float, n: int, seed: int = 0) -> np.ndarray:
    """n log ratios with exactly this mean and sample sd."""
    z = np.random.default_rng(seed).normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + sd * z


def test_same_when_the_interval_lies_inside_the_margin():
    v = decide(_rounds(0.0, 0.02, 20), "tpot_s")
    assert v.verdict == "same" and v.rounds == 20 and v.ratio.rounds == 20 and v.ratio.n == 20
    assert 1 / 1.03 < v.ratio.ci_low < 1 < v.ratio.ci_high < 1.03
    assert v.ratio.value == pytest.approx(1.0)
    assert not v.more_rounds_help and v.rounds_to_decide is None


def test_different_when_b_is_slower_beyond_the_margin():
    v = decide(_rounds(math.log(1.10), 0.03, 12), "tpot_s")
    assert v.verdict == "different"
    assert v.ratio.value == pytest.approx(1.10)
    assert v.ratio.ci_low > 1.03
    half = 0.03 * ABRule().multiplier(12)
    assert math.log(v.ratio.ci_high / v.ratio.value) == pytest.approx(half)
    assert v.spread == pytest.approx(0.03)


def test_improved_when_b_is_faster_beyond_the_margin():
    v = decide(_rounds(-math.log(1.10), 0.03, 12), "step_time_s")
    assert v.verdict == "improved" and v.ratio.ci_high < 1 / 1.03


def test_throughput_falls_when_b_is_slower():
    """For a throughput a drop is the regression: B/A = 1/1.1 is *different*, 1.1 is *improved*."""
    slower = decide(_rounds(-math.log(1.10), 0.03, 12), "output_tps")
    faster = decide(_rounds(math.log(1.10), 0.03, 12), "output_tps")
    assert (slower.verdict, faster.verdict) == ("different", "improved")
    assert slower.ratio.value == pytest.approx(1 / 1.10)
    assert regression_sign("tpot_s") == 1 and regression_sign("output_tps") == -1


def test_undecided_on_the_margin_and_more_rounds_do_not_help():
    v = decide(_rounds(math.log(1.03), 0.05, 16), "tpot_s")
    assert v.verdict == "undecided"
    assert v.rounds_to_decide is None and not v.more_rounds_help


def test_undecided_wide_interval_says_when_it_would_decide():
    lr = _rounds(0.0, 0.035, 14)
    v = decide(lr, "tpot_s")
    assert v.verdict == "undecided" and v.more_rounds_help
    assert v.rounds_to_decide is not None and 14 < v.rounds_to_decide <= ABRule().max_rounds
    # the same spread and estimate at that many rounds decide, one fewer does not
    n = v.rounds_to_decide
    assert decide(_rounds(0.0, 0.035, n), "tpot_s").verdict == "same"
    assert decide(_rounds(0.0, 0.035, n - 1), "tpot_s").verdict == "undecided"


def test_beyond_the_cap_more_rounds_do_not_help():
    rule = ABRule(min_rounds=4, max_rounds=10)
    v = decide(_rounds(0.0, 0.10, 10), "tpot_s", rule)
    assert v.verdict == "undecided" and v.rounds_to_decide is not None and v.rounds_to_decide > 10
    assert not v.more_rounds_help


def test_no_verdict_before_min_rounds():
    rule = ABRule()
    lr = _rounds(math.log(1.5), 0.01, rule.min_rounds)
    path = decision_path(lr, "tpot_s", rule)
    assert list(path.verdict[: rule.min_rounds - 1]) == ["undecided"] * (rule.min_rounds - 1)
    assert path.verdict[-1] == "different" and path.first_decided() == rule.min_rounds - 1
    v = decide(lr[:-1], "tpot_s", rule)
    assert v.verdict == "undecided" and v.more_rounds_help


def test_rounds_all_alike_give_no_interval():
    v = decide(np.full(10, 0.2), "tpot_s")
    assert v.verdict == "undecided" and v.ratio.ci_low == 0.0 and v.ratio.ci_high == math.inf


def test_no_rounds():
    v = decide([], "tpot_s")
    assert v.verdict == "undecided" and v.rounds == 0 and v.ratio.value is None and v.more_rounds_help


def test_pooled_over_common_rounds():
    per = {"b1": [0.1, 0.2, 0.3, 0.4], "b4": [0.3, 0.0, 0.1]}
    assert pool_rounds(per) == pytest.approx([0.2, 0.1, 0.2])
    v = decide_pooled({"b1": _rounds(0.0, 0.02, 20, 1), "b4": _rounds(0.0, 0.02, 25, 2)}, "tpot_s")
    assert v.groups == 2 and v.rounds == 20 and v.verdict == "same"


def test_log_ratios_pair_rounds():
    assert log_ratios([1.0, 2.0], [1.1, 2.0]) == pytest.approx([math.log(1.1), 0.0])
    with pytest.raises(ValueError):
        log_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        log_ratios([0.0], [1.0])
    with pytest.raises(ValueError):
        decide([0.1, 0.2], "tau")  # counted, not timed: no speed verdict


def test_rounds_for_power():
    rule = ABRule()
    n = rounds_for_power(0.05, rule)
    assert n is not None and rule.min_rounds <= n
    assert rounds_for_power(0.10, rule) > n > rounds_for_power(0.02, rule)
    assert rounds_for_power(0.05, ABRule(margin=0.05)) > n  # a wider margin leaves less room
    assert rounds_for_power(0.05, rule, change=0.03) is None  # a change within the margin is never different
    gap = math.log(1.10) - math.log(1.03)  # at n the approximate power is ≥ 90 %, at n − 1 below

    def short(k: int) -> float:  # how far the 10th percentile of mean − ŝ·M(k) falls short of the margin
        m = float(rule.multiplier(k))
        return 0.05 * (m + 1.2816 * math.sqrt(1 / k + m * m / (2 * (k - 1)))) - gap

    assert short(n) <= 0 and (n == rule.min_rounds or short(n - 1) > 0)
    with pytest.raises(ValueError):
        rounds_for_power(0.0, rule)


def test_block_resample_keeps_consecutive_rounds():
    x = np.arange(10.0)
    s = block_resample(x, 7, 5, 3, np.random.default_rng(0))
    assert s.shape == (5, 7)
    assert np.all((np.diff(s[:, :3], axis=1) % 10) == 1)  # the first block is 3 consecutive rounds
    two = block_resample(np.stack([x, 10 * x]), 7, 5, 3, np.random.default_rng(0))
    assert two.shape == (5, 2, 7) and np.array_equal(two[:, 1], 10 * two[:, 0])  # groups move together
