"""Issue 22: a run's speed intervals with the between-run noise of an A/A calibration — the interval
primitive, the summary it makes (speed widened, τ untouched, the headline decided again), how it is
stored, found beside a run, reported, and how compare and gate read a calibrated run."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from support.factories import stored_summary
from support.paths import FIXTURES, SUITES
from typer.testing import CliRunner

from specbench import api
from specbench.analysis.apply_noise import with_speed_noise
from specbench.cli import app
from specbench.regression.calibrate_noise import aa_noise_calibration
from specbench.regression.gate import NOT_GATED, evaluate_gate
from specbench.regression.gate_rules import GateRules
from specbench.regression.run_diff import compare_runs, render_comparison_markdown
from specbench.results.fmt import speed_intervals_note
from specbench.results.manifest import RunManifest
from specbench.results.noise_calibration import (
    MetricNoise,
    NoiseCalibration,
    NoiseError,
    check_applies,
    find_noise,
    save_noise,
)
from specbench.results.parts import HeadlineRow
from specbench.results.run_noise import run_speed_noise
from specbench.results.summary import RunSummary
from specbench.stats import Estimate, with_between_run

RULES = GateRules.model_validate({"rules": {"equivalence": None}})


def cal_of(hw: str = "cpu-2c", suite: str = "s", **floors: float) -> NoiseCalibration:
    return NoiseCalibration(hardware_class=hw, suite=suite, runs=["a", "b", "c"],
                            metrics={k: MetricNoise(noise_floor_pct=v, pairs=3, changes=30, max_change_pct=2 * v)
                                     for k, v in floors.items()})


def est(v: float, lo: float, hi: float, n: int = 8) -> Estimate:
    return Estimate(value=v, ci_low=lo, ci_high=hi, n=n, method="bootstrap")


def fixture_summary() -> RunSummary:
    s = stored_summary()
    row = HeadlineRow(target="t", dataset="gsm8k", temperature=0.0, batch_size=1, method="dflash",
                      method_kind="dflash", method_group="t/dflash/gsm8k/T0/b1", method_k=3, reference="eagle3",
                      reference_group="t/eagle3/gsm8k/T0/b1", reference_k=3, n_prompts=8,
                      tau_ratio=est(1.2, 1.1, 1.3), speedup_ratio=est(1.05, 1.02, 1.08), verdict="faster")
    return s.model_copy(update={"headline": [row], "suite_name": "s"})


def test_between_run_noise_adds_to_each_side_in_quadrature() -> None:
    e = with_between_run(est(2.0, 1.7, 2.4), 10.0)  # between-run half-width: 10 % of 2.0 = 0.2
    assert e.ci_low == pytest.approx(2.0 - math.hypot(0.3, 0.2)) and e.ci_high == pytest.approx(2.0 + math.hypot(0.4, 0.2))
    assert e.value == 2.0 and e.n == 8 and e.method == "bootstrap + between-run (A/A)"
    alone = with_between_run(Estimate(value=4.0, n=3), 5.0)  # no interval of its own: the between-run one
    assert (alone.ci_low, alone.ci_high) == pytest.approx((3.8, 4.2))
    assert with_between_run(est(2.0, 1.7, 2.4), 0.0) == est(2.0, 1.7, 2.4)


def test_a_calibrated_summary_widens_speed_only_and_decides_the_headline_again() -> None:
    s = fixture_summary()
    cal = cal_of(speedup=3.0, output_tps=8.0, speedup_ratio=4.0)
    w = with_speed_noise(s, cal)
    for g, h in zip(s.groups, w.groups, strict=True):
        assert h.tau == g.tau and h.accuracy == g.accuracy and h.per_position == g.per_position
        for name, pct in (("speedup", 3.0), ("output_tps", 8.0)):
            a, b = getattr(g, name), getattr(h, name)
            if a is None or a.value is None:
                continue
            assert b.ci_low == pytest.approx(a.value - math.hypot(a.value - a.ci_low, a.value * pct / 100))
            assert b.ci_high == pytest.approx(a.value + math.hypot(a.ci_high - a.value, a.value * pct / 100))
    # 1.05 [1.02, 1.08] was "faster"; ±4 % between runs puts 1 inside: not distinguishable.
    r = w.headline[0]
    assert r.speedup_ratio.ci_low is not None and r.speedup_ratio.ci_low < 1 < (r.speedup_ratio.ci_high or 0)
    assert r.verdict == "not distinguishable" and r.tau_ratio == s.headline[0].tau_ratio
    assert w.extra.speed_noise == cal and s.extra.speed_noise is None  # a new summary; the old one is as it was
    with pytest.raises(ValueError, match="already include"):
        with_speed_noise(w, cal)


def test_a_summary_without_a_calibration_is_stored_as_before_and_one_with_it_round_trips() -> None:
    s = fixture_summary()
    assert "speed_noise" not in s.model_dump(mode="json")["extra"]
    w = with_speed_noise(s, cal_of(speedup=3.0))
    assert RunSummary.load(json.loads(json.dumps(w.model_dump(mode="json")))) == w
    assert "A/A calibration on 3 identical-code runs of s on cpu-2c: speedup ±3.0 %" in speed_intervals_note(w)
    assert "this run only" in speed_intervals_note(s) and "this run only" in speed_intervals_note(s, short=True)


def test_calibration_covers_every_timed_metric_and_the_headline_ratio() -> None:
    runs = []
    for i, f in enumerate((1.0, 1.04, 0.97)):
        s = fixture_summary()
        g = [x.model_copy(update={"tpot_s": est(0.02 * f, 0.019 * f, 0.021 * f)}) for x in s.groups]
        row = s.headline[0].model_copy(update={"speedup_ratio": est(1.05 * f, 1.0, 1.1)})
        runs.append(s.model_copy(update={"run_id": f"r{i}", "groups": g, "headline": [row]}))
    cal = aa_noise_calibration(runs, "cpu-2c")
    assert {"speedup_ratio", "tpot_s", "output_tps", "speedup"} <= set(cal.metrics)
    assert cal.metrics["speedup_ratio"].changes == 3 and cal.metrics["speedup_ratio"].max_change_pct == pytest.approx(
        100 * (1.04 - 0.97) / 1.04, abs=1e-3)  # the largest |b − a| / |a| over the 3 pairs


def test_compare_tests_speed_when_both_runs_carry_a_calibration() -> None:
    cal = cal_of(speedup=3.0, output_tps=8.0)
    a, b = fixture_summary(), fixture_summary().model_copy(update={"run_id": "rerun"})
    plain = compare_runs(a, b)
    assert not plain.speed_calibrated and all(
        not c.tested for g in plain.groups for c in g.changes if c.metric == "speedup")
    both = compare_runs(with_speed_noise(a, cal), with_speed_noise(b, cal))
    assert both.speed_calibrated and any(c.tested for g in both.groups for c in g.changes if c.metric == "speedup")
    assert "Speed is tested" in render_comparison_markdown(both)


def test_gate_uses_the_calibration_the_new_run_was_analysed_with() -> None:
    old, new = fixture_summary(), fixture_summary().model_copy(update={"run_id": "rerun"})
    assert any(w.startswith(NOT_GATED) for w in evaluate_gate(new, old, RULES).warnings)
    cal = cal_of(speedup=3.0)
    r = evaluate_gate(with_speed_noise(new, cal), old, RULES, noise=with_speed_noise(new, cal).extra.speed_noise)
    assert r.exit_code == 0 and any(c.metric == "speedup" and "noise floor ±3%" in c.message for c in r.checks)


def test_a_calibration_applies_to_its_hardware_class_and_suite_only(tmp_path: Path) -> None:
    run = tmp_path / "s" / "run1"
    run.mkdir(parents=True)
    assert find_noise(run, "cpu-2c", "s") == (None, None)  # nothing beside the run
    save_noise(cal_of(speedup=3.0), tmp_path / "s" / "noise.json")
    cal, why = find_noise(run, "cpu-2c", "s")
    assert cal is not None and why is None
    cal, why = find_noise(run, "gpu:H200 x1", "s")
    assert cal is None and why is not None and "calibrated on 'cpu-2c', the run is on 'gpu:H200 x1'" in why
    with pytest.raises(NoiseError, match="suite 's', the run is of 'other'"):
        check_applies(cal_of(), "cpu-2c", "other", "noise.json")


def test_calibrate_then_analyze_puts_the_noise_into_the_runs_speed_intervals(tmp_path: Path) -> None:
    """The recorded real run (tests/fixtures/recorded) twice: `specbench calibrate` writes noise.json beside
    them (their changes are 0: floors 0), then a calibration with known floors kept there widens the
    speed intervals `analyze` writes; one of another hardware class is refused when given, and unused
    (said in the summary) when found."""
    root = tmp_path / "results" / "recorded"
    runs = [root / "r1", root / "r2"]
    for r in runs:
        shutil.copytree(FIXTURES / "recorded", r)
    res = CliRunner().invoke(app, ["calibrate", *map(str, runs)])
    assert res.exit_code == 0, res.output
    made = json.loads((root / "noise.json").read_text())
    assert made["suite"] == "recorded" and made["metrics"]["speedup"]["noise_floor_pct"] == 0
    hw = made["hardware_class"]
    plain = api.load_summary(runs[0])  # analysed by calibrate, before any floor mattered
    save_noise(cal_of(hw=hw, suite="recorded", speedup=10.0, output_tps=10.0), root / "noise.json")
    widened = api.analyze(runs[0])
    ngram = widened.groups[1]
    before = plain.groups[1]
    assert ngram.tau == before.tau and widened.extra.speed_noise is not None
    assert ngram.speedup is not None and before.speedup is not None and before.speedup.value is not None
    assert ngram.speedup.ci_high == pytest.approx(before.speedup.value + math.hypot(
        (before.speedup.ci_high or 0) - before.speedup.value, 0.1 * before.speedup.value))
    other = tmp_path / "other.json"
    save_noise(cal_of(hw="gpu:H200 x1", suite="recorded", speedup=10.0), other)
    with pytest.raises(NoiseError, match="the run is on"):
        api.analyze(runs[1], noise=other)
    shutil.copy(other, root / "noise.json")
    unused = api.analyze(runs[1])
    assert unused.extra.speed_noise is None and "not used" in (unused.extra.speed_noise_note or "")
    assert CliRunner().invoke(app, ["analyze", str(runs[1]), "--noise", str(other)]).exit_code == 2


def test_a_suite_names_its_calibration_relative_to_itself(tmp_path: Path) -> None:
    """`speed_noise:` in a suite: a missing file is a file:line error; an existing one is what a run of the
    suite on that hardware class uses when no calibration is kept beside the run."""
    from specbench.config.suite import SuiteError, load_suite

    text = (SUITES / "cpu-tour.yaml").read_text().replace("\nrepeats: 1", "\nrepeats: 1\nspeed_noise: n.json")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(SuiteError) as exc:
        load_suite(tmp_path / "s.yaml")
    assert any(m.startswith(f"{tmp_path / 's.yaml'}:") and "'n.json' does not exist" in m for m in exc.value.messages)
    save_noise(cal_of(hw="cpu-2c", suite="cpu-smoke", speedup=3.0), tmp_path / "n.json")
    assert load_suite(tmp_path / "s.yaml").speed_noise == "n.json"
    manifest = RunManifest.load({"run_id": "r1", "hardware_class": "cpu-2c", "suite_name": "cpu-smoke",
                                 "suite_path": str(tmp_path / "s.yaml"),
                                 "suite": load_suite(tmp_path / "s.yaml").model_dump(mode="json")})
    run = tmp_path / "results" / "cpu-smoke" / "r1"
    cal, why = run_speed_noise(run, manifest, None)
    assert cal is not None and cal.floor_pct("speedup") == 3.0 and why is None
    cal, why = run_speed_noise(run, manifest.model_copy(update={"hardware_class": "other"}), None)
    assert cal is None and why is not None and "the run is on 'other'" in why
