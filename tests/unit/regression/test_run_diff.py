"""compare_runs: matching, difference intervals, significance, multiplicity, rendering."""

from __future__ import annotations

import math
import random

import pytest
from support.factories import cell, cell_record, counters, request, stored_summary

from specbench.analysis.metrics import summarize
from specbench.regression.run_diff import (
    bonferroni_widen,
    compare_runs,
    metric_change,
    render_comparison_markdown,
)
from specbench.results.records import SpecCounters
from specbench.results.summary import RunSummary
from specbench.stats import Estimate


def test_difference_interval_is_mover_of_the_two_intervals() -> None:
    base = Estimate(value=2.0, ci_low=1.9, ci_high=2.2, n=50)
    new = Estimate(value=1.7, ci_low=1.6, ci_high=1.75, n=50)
    c = metric_change("tau", base, new)
    assert c is not None
    assert c.diff == pytest.approx(-0.3)
    assert c.diff_low == pytest.approx(-0.3 - math.hypot(0.1, 0.2))
    assert c.diff_high == pytest.approx(-0.3 + math.hypot(0.05, 0.1))
    assert c.significant and c.verdict == "worse" and c.rel_change == pytest.approx(-0.15)
    # Symmetric normal intervals: the usual ±1.96·sqrt(se1² + se2²).
    se = 0.1
    b = Estimate(value=1.0, ci_low=1 - 1.96 * se, ci_high=1 + 1.96 * se)
    n = Estimate(value=1.1, ci_low=1.1 - 1.96 * se, ci_high=1.1 + 1.96 * se)
    c = metric_change("speedup", b, n)
    assert c is not None and c.diff_high - c.diff == pytest.approx(1.96 * math.sqrt(2) * se)
    assert not c.significant and c.verdict == "no significant change"
    # No interval on one side: a difference but no claim.
    c = metric_change("tau", Estimate(value=2.0), new)
    assert c is not None and c.diff_low is None and not c.significant and c.verdict == "no interval"


def test_bonferroni_widen() -> None:
    assert bonferroni_widen(1) == pytest.approx(1.0)
    assert bonferroni_widen(0) == pytest.approx(1.0)
    assert bonferroni_widen(10) == pytest.approx(2.807 / 1.96, rel=1e-3)
    assert bonferroni_widen(1, 0.99) == pytest.approx(2.5758 / 1.96, rel=1e-3)


def test_same_suite_other_seed_shows_no_significant_change() -> None:
    comp = compare_runs(stored_summary(), stored_summary("rerun"))
    assert comp.n_comparisons > 50 and comp.changes(significant_only=True) == []
    assert {g.group_id for g in comp.groups} == {g.group_id for g in stored_summary().groups}
    assert not comp.only_in_base and not comp.only_in_new


def test_speed_is_shown_but_not_tested_without_a_noise_floor() -> None:
    comp = compare_runs(stored_summary(), stored_summary("regressed"))
    speed = [c for _, c in comp.changes() if c.metric in ("speedup", "output_tps")]
    assert speed and all(c.verdict == "not tested" and not c.significant for c in speed)
    assert "not tested" in render_comparison_markdown(comp)
    # with a floor the same drop is tested, and a floor wider than the drop hides it
    floored = compare_runs(stored_summary(), stored_summary("regressed"), speed_noise_floor_pct=1)
    assert any(c.metric == "speedup" and c.verdict == "worse" for _, c in floored.changes(True))
    wide = compare_runs(stored_summary(), stored_summary("regressed"), speed_noise_floor_pct=80)
    assert not any(c.metric == "speedup" and c.significant for _, c in wide.changes())


def test_regressions_are_found_and_rendered() -> None:
    comp = compare_runs(stored_summary(), stored_summary("regressed"), speed_noise_floor_pct=0)
    worse = {(g.group_id, c.metric) for g, c in comp.changes(significant_only=True) if c.verdict == "worse"}
    assert ("llama-3.1-8b/eagle3/gsm8k/T0/b1", "tau") in worse
    assert ("llama-3.1-8b/eagle3/gsm8k/T0/b1", "speedup") in worse
    assert ("llama-3.1-8b/p-eagle/gsm8k/T0/b1", "accuracy.exact_match") in worse
    assert ("llama-3.1-8b/eagle3/humaneval/T0/b1", "tau") not in worse  # -1.5%, inside the noise
    text = render_comparison_markdown(comp)
    assert "## Significant changes" in text and "| llama-3.1-8b/eagle3/gsm8k/T0/b1 | tau | 2.85" in text
    assert "## Equivalence changes" in text and "| not shown equivalent | divergent |" in text
    assert "family-wise over" in text


def test_unmatched_groups_and_status_changes() -> None:
    base, new = stored_summary(), stored_summary("rerun")
    new.groups = [g for g in new.groups if g.method != "p-eagle"]
    new.groups[1].status = "failed"
    comp = compare_runs(base, new)
    assert len(comp.only_in_base) == 4 and not comp.only_in_new
    text = render_comparison_markdown(comp)
    assert "only in base: llama-3.1-8b/p-eagle/gsm8k/T0/b1" in text and "## Status changes" in text


# --------------------------------------------------------------------------
# Real intervals: summaries built by metrics.summarize from simulated records


def simulate(seed: int, accept: float = 0.7, n_prompts: int = 60) -> RunSummary:
    """A baseline and an EAGLE-3-like method at T=1; prompts fixed, sampling and timing noise per seed."""
    lengths = random.Random(0)  # the prompts are the suite's: the same in every run
    sizes = [lengths.randint(40, 200) for _ in range(n_prompts)]
    rng = random.Random(seed)
    cb, cm = cell("baseline", temperature=1.0), cell("eagle3", k=3, temperature=1.0)
    reqs, total = [], SpecCounters()
    for i, toks in enumerate(sizes):
        pid = f"p{i}"
        reqs.append(request(cb, pid, tokens=[1] * toks, engine_key="b",
                            latency_s=toks / 100 * rng.lognormvariate(0, 0.05)))
        drafts, pos, made = 0, [0, 0, 0], 0
        while made < toks:
            drafts += 1
            j = 0
            while j < 3 and rng.random() < accept:
                pos[j] += 1
                j += 1
            made += j + 1
        spec = counters(sum(pos), drafts, per_position=pos)
        total = total + spec
        reqs.append(request(cm, pid, tokens=[1] * toks, engine_key="m", spec=spec,
                            latency_s=drafts * 0.018 * rng.lognormvariate(0, 0.05)))
    cells = [cell_record(cb, engine_key="b", wall_time_s=10.0),
             cell_record(cm, engine_key="m", counters=total, wall_time_s=6.0)]
    return summarize(f"sim-{seed}", "sim", [cb, cm], cells, reqs)


def test_simulated_reruns_are_quiet_and_a_real_drop_is_not() -> None:
    runs = [simulate(seed) for seed in range(1, 9)]
    flagged_fw = [bool(compare_runs(runs[0], r).changes(True)) for r in runs[1:]]
    flagged_raw = [bool(compare_runs(runs[0], r, family_wise=False).changes(True)) for r in runs[1:]]
    assert sum(flagged_fw) <= 1, flagged_fw
    assert sum(flagged_fw) <= sum(flagged_raw)
    drop = compare_runs(runs[0], simulate(99, accept=0.6), speed_noise_floor_pct=0)
    worse = {c.metric for _, c in drop.changes(True) if c.verdict == "worse"}
    assert {"tau", "per_position.1", "speedup"} <= worse, worse
