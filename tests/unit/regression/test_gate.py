"""Regression gate: rules, baselines, the two-condition regression test, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.factories import run_summary, stored_summary
from support.paths import FIXTURES, REPO

from specbench.regression.gate import evaluate_gate
from specbench.regression.gate_baseline import ExpectedValues, expected_from_run, load_baseline
from specbench.regression.gate_rules import GateConfigError, GateRules, load_rules
from specbench.report.gate_verdict import render_gate
from specbench.results.noise_calibration import MetricNoise, NoiseCalibration
from specbench.results.summary import RunSummary
from specbench.stats import Estimate

NO_EQUIVALENCE = GateRules.model_validate({"rules": {"equivalence": None}})


def failing(result) -> set[tuple[str, str]]:
    return {(c.group_id, c.metric) for c in result.failures}


def test_rerun_with_another_seed_passes() -> None:
    r = evaluate_gate(stored_summary("rerun"), stored_summary(), NO_EQUIVALENCE)
    assert r.exit_code == 0 and r.status == "pass" and not r.failures
    assert r.n_comparisons > 10 and r.widen > 1
    assert "PASS (exit 0" in render_gate(r)


def test_default_rules_fail_a_divergent_method() -> None:
    r = evaluate_gate(stored_summary("rerun"), stored_summary())
    assert r.exit_code == 1
    assert failing(r) == {("llama-3.1-8b/p-eagle/humaneval/T0/b8", "equivalence")}


def noise(pct: float) -> NoiseCalibration:
    """A hand-made A/A calibration: every speed metric's floor at ``pct`` percent."""
    return NoiseCalibration(hardware_class="test", suite="x", runs=["a", "b"], metrics={
        m: MetricNoise(noise_floor_pct=pct, pairs=1, changes=10, max_change_pct=pct) for m in ("speedup", "output_tps")})


def test_regressions_are_named_with_their_numbers() -> None:
    r = evaluate_gate(stored_summary("regressed"), stored_summary(), noise=noise(1.0))
    assert r.exit_code == 1
    fails = failing(r)
    for gid in ("llama-3.1-8b/eagle3/gsm8k/T0/b1", "llama-3.1-8b/eagle3/gsm8k/T0/b8"):
        assert (gid, "tau") in fails and (gid, "speedup") in fails
    assert ("llama-3.1-8b/p-eagle/gsm8k/T0/b1", "accuracy.exact_match") in fails
    assert ("llama-3.1-8b/p-eagle/gsm8k/T0/b8", "equivalence") in fails
    assert ("llama-3.1-8b/eagle3/humaneval/T0/b1", "tau") not in fails  # -1.5% < 3%
    text = render_gate(r)
    assert "FAIL tau on llama-3.1-8b/eagle3/gsm8k/T0/b1: 2.850 [2.790, 2.910] → 2.565" in text
    assert "(-10.0%; max drop 3%)" in text and "significant" in text


def test_regression_needs_both_threshold_and_significance() -> None:
    base = stored_summary("minimal")
    for g in base.groups:  # give the minimal run intervals
        if g.tau is not None and g.tau.value is not None:
            g.tau = Estimate(value=2.0, ci_low=1.98, ci_high=2.02, n=500)
    gid = base.groups[1].group_id

    def with_tau(value: float, half: float) -> RunSummary:
        new = base.model_copy(deep=True)
        new.groups[1].tau = Estimate(value=value, ci_low=value - half, ci_high=value + half, n=500)
        return new

    rules = GateRules.model_validate({"rules": {"speedup": None}})
    # -5% and tight: beyond 3% and significant → fail.
    assert (gid, "tau") in failing(evaluate_gate(with_tau(1.90, 0.02), base, rules))
    # -2% and tight: significant but within 3% → pass.
    assert evaluate_gate(with_tau(1.96, 0.005), base, rules).exit_code == 0
    # -5% but wide: beyond 3% yet not significant → pass.
    assert evaluate_gate(with_tau(1.90, 0.4), base, rules).exit_code == 0
    # +10%: better, never a failure.
    assert evaluate_gate(with_tau(2.2, 0.02), base, rules).exit_code == 0
    # A noise floor of ±5% per run makes the tight -5% drop insignificant.
    floored = GateRules.model_validate({"rules": {"speedup": None, "tau": {"max_drop_pct": 3, "noise_floor_pct": 5}}})
    assert evaluate_gate(with_tau(1.90, 0.02), base, floored).exit_code == 0
    assert (gid, "tau") in failing(evaluate_gate(with_tau(1.70, 0.02), base, floored))


def test_expected_values_baseline(tmp_path: Path) -> None:
    gid = "llama-3.1-8b/eagle3/gsm8k/T0/b1"
    exp = {"groups": {gid: {"tau": {"value": 3.2, "ci_low": 3.15, "ci_high": 3.25, "tolerance_pct": 3},
                            "speedup": {"value": 1.95}}}}
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(exp))
    baseline = load_baseline(path)
    assert isinstance(baseline, ExpectedValues)
    r = evaluate_gate(stored_summary(), baseline, NO_EQUIVALENCE)
    assert failing(r) == {(gid, "tau")}  # 2.85 vs 3.2: -11%; speedup 1.92 vs exact 1.95: -1.5% ok
    exp["groups"][gid]["tau"]["tolerance_pct"] = 15
    path.write_text(json.dumps(exp))
    assert evaluate_gate(stored_summary(), load_baseline(path), NO_EQUIVALENCE).exit_code == 0
    # A run's own expected values pass against it.
    assert evaluate_gate(stored_summary(), expected_from_run(stored_summary()), NO_EQUIVALENCE).exit_code == 0


def test_baseline_as_run_dir_and_bad_baselines(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text((FIXTURES / "summary_full.json").read_text())
    assert isinstance(load_baseline(run), RunSummary)
    for content, match in [("{not json", "invalid JSON"), ('{"a": 1}', "no 'groups'"),
                           ('{"groups": {"g": {"taux": {"value": 1}}}}', "unknown metric 'taux'"),
                           ('{"groups": {"g": {"tau": {"value": 3, "ci_low": 3.5, "ci_high": 4}}}}', "ci_low")]:
        bad = tmp_path / "bad.json"
        bad.write_text(content)
        with pytest.raises(GateConfigError, match=match) as err:
            load_baseline(bad)
        assert err.value.exit_code == 2
    with pytest.raises(GateConfigError, match="cannot read"):
        load_baseline(tmp_path / "missing.json")


def test_rules_loading(tmp_path: Path) -> None:
    assert load_rules(None) == GateRules()
    example = load_rules(REPO / "gates.example.yaml")
    assert example.for_group("t/ngram/d/T0/b1").speedup.max_drop_pct == 10
    assert example.for_group("t/eagle3/d/T0/b1").speedup.max_drop_pct == 5
    for text, match in [("rules: {tau: {max_drop_pct: -1}}", "greater than or equal"),
                        ("rules: {taux: {max_drop_pct: 1}}", "taux"),
                        ("rules: {tau: {}}", "exactly one"),
                        ("confidence: 2", "confidence"),
                        ("rules: [1, 2", "invalid YAML"),
                        ("- just a list", "mapping")]:
        p = tmp_path / "rules.yaml"
        p.write_text(text)
        with pytest.raises(GateConfigError, match=match):
            load_rules(p)
    p = tmp_path / "partial.yaml"
    p.write_text("rules: {tau: {max_drop_pct: 1}, speedup: null}\n")
    rules = load_rules(p)
    r = rules.rules
    assert r.rule("tau").max_drop_pct == 1 and r.rule("speedup") is None and r.rule("accuracy").max_drop_pct == 0
    assert r.rule("per_position") is None and r.rule("greedy_match") is None  # no default rule in the catalogue


def test_nothing_measured_and_no_overlap() -> None:
    empty = run_summary(run_id="e")
    assert evaluate_gate(empty, stored_summary()).exit_code == 3
    all_failed = stored_summary()
    for g in all_failed.groups:
        g.status = "failed"
    r = evaluate_gate(all_failed, stored_summary())
    assert r.exit_code == 3 and r.status == "nothing measured" and "ERROR" in render_gate(r)
    r = evaluate_gate(stored_summary("minimal"), stored_summary())
    assert r.exit_code == 2 and "no group of the new run" in render_gate(r)


def test_missing_groups_fail_or_warn() -> None:
    new = stored_summary("rerun")
    new.groups = [g for g in new.groups if not (g.method == "eagle3" and g.batch_size == 8)]
    r = evaluate_gate(new, stored_summary(), NO_EQUIVALENCE)
    assert r.exit_code == 1 and ("llama-3.1-8b/eagle3/gsm8k/T0/b8", "group") in failing(r)
    warn = NO_EQUIVALENCE.model_copy(update={"missing": "warn"})
    r = evaluate_gate(new, stored_summary(), warn)
    assert r.exit_code == 0 and len([w for w in r.warnings if "missing from the new run" in w]) == 2
    assert "missing from the new run" in render_gate(r)


def test_group_globs_and_require_equivalent() -> None:
    only_eagle = GateRules.model_validate({"groups": ["*/eagle3/*"]})
    assert evaluate_gate(stored_summary("rerun"), stored_summary(), only_eagle).exit_code == 0  # p-eagle's divergence not gated
    strict = GateRules.model_validate({"groups": ["*/p-eagle/gsm8k/*"],
                                       "rules": {"equivalence": {"require": "equivalent"}}})
    r = evaluate_gate(stored_summary("rerun"), stored_summary(), strict)
    assert failing(r) == {("llama-3.1-8b/p-eagle/gsm8k/T0/b8", "equivalence")}  # not shown equivalent


def test_sampled_divergence_counts_family_wise() -> None:
    """A sampled-equivalence p-value at the test's own α fails the gate only when it also clears α / m over
    the m sampled tests gated (Bonferroni, like the metric comparisons); without family_wise, at α alone.
    Measured 2026-12-04: 1 of 14 sampled groups of an unchanged cpu-smoke run had p = 0.0046 at α = 0.01."""
    from specbench.results.parts import Equivalence, SampledEquivalence

    def with_sampled(s: RunSummary, ps: list[float]) -> RunSummary:
        s = s.model_copy(deep=True)
        for g, p in zip(s.groups, ps, strict=False):
            verdict = "divergent" if p <= 0.01 else "not shown equivalent"
            g.equivalence = Equivalence(sampled=SampledEquivalence(verdict=verdict, pvalue=p, alpha=0.01, n_tokens=512))
        return s

    base = stored_summary()
    n = len(base.groups)
    assert n >= 8
    ps = [0.0046, 1e-5] + [0.5] * (n - 2)  # one borderline, one clear divergence
    r = evaluate_gate(with_sampled(base, ps), base, GateRules.model_validate({"rules": {}}))
    eq = {c.group_id: c for c in r.checks if c.metric == "equivalence"}
    first, second = (g.group_id for g in base.groups[:2])
    assert eq[second].passed is False
    m = re.search(r"not at α/(\d+)=", eq[first].message)
    assert eq[first].passed is True and m and 2 <= int(m.group(1)) <= n, eq[first].message
    alone = evaluate_gate(with_sampled(base, ps), base, GateRules.model_validate({"family_wise": False, "rules": {}}))
    assert {c.group_id for c in alone.failures if c.metric == "equivalence"} == {first, second}


def test_a_lossy_groups_divergence_is_its_construction_not_a_regression() -> None:
    """Synthetic acceptance diverges from the target by design: the same divergent group marked lossy
    fails no equivalence check (and its report says why, tests/unit/report)."""
    new = stored_summary("rerun")
    lossy = new.model_copy(update={"groups": [
        g.model_copy(update={"lossy": "synthetic acceptance"}) if g.group_id == "llama-3.1-8b/p-eagle/humaneval/T0/b8"
        else g for g in new.groups]})
    assert evaluate_gate(new, stored_summary()).exit_code == 1
    r = evaluate_gate(lossy, stored_summary())
    assert r.exit_code == 0 and not r.failures
    assert all(c.group_id != "llama-3.1-8b/p-eagle/humaneval/T0/b8" for c in r.checks if c.metric == "equivalence")
