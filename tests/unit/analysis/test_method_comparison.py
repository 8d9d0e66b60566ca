"""Methods against each other on hand-built records: headline ratios, K sweeps, step time, ratio rules."""

from __future__ import annotations

import numpy as np
import pytest
from support.factories import cell, cell_record, counters, request

from specbench.analysis import group_acceptance, metrics, step_time
from specbench.analysis import method_comparison as comparison
from specbench.config.plan import Cell
from specbench.regression.gate import evaluate_gate
from specbench.regression.gate_rules import GateRules
from specbench.results.records import CellRecord, RequestRecord

PROMPTS = [f"p{i}" for i in range(8)]


def _req(cell: Cell, pid: str, *, tokens: int, drafts: int, accepted: int, step_s: float, ttft: float = 0.01):
    k = cell.k or 1
    spec = None if cell.method_kind == "baseline" else counters(accepted, drafts, k=k,
                                                                per_position=[accepted] + [0] * (k - 1))
    steps_n = drafts if spec is not None else tokens - 1
    return request(cell, pid, tokens=tokens, output_text="x", ttft_s=ttft, latency_s=ttft + steps_n * step_s,
                   spec=spec)


def _arm(cell: Cell, rng: np.random.Generator, *, base_step: float, per_k: float, acc_rate: float,
         prompts=PROMPTS) -> tuple[list[RequestRecord], CellRecord]:
    reqs = []
    for pid in prompts:
        tokens = int(rng.integers(40, 80))
        if cell.method_kind == "baseline":
            reqs.append(_req(cell, pid, tokens=tokens, drafts=0, accepted=0, step_s=base_step * rng.uniform(0.9, 1.1)))
            continue
        drafts = int(rng.integers(15, 25))
        accepted = int(drafts * acc_rate * rng.uniform(0.8, 1.2))
        step = (base_step + per_k * (cell.k or 0)) * rng.uniform(0.95, 1.05)
        reqs.append(_req(cell, pid, tokens=tokens, drafts=drafts, accepted=accepted, step_s=step))
    return reqs, cell_record(cell, counters=group_acceptance.sum_counters(r.spec for r in reqs), num_requests=len(reqs),
                             wall_time_s=1.0)


@pytest.fixture(scope="module")
def run():
    rng = np.random.default_rng(0)
    arms = {
        "baseline": (cell("baseline"), dict(base_step=0.010, per_k=0, acc_rate=0)),
        "eagle3-k1": (cell("eagle3-k1", "eagle3", 1, family="eagle3"),
                      dict(base_step=0.012, per_k=0.004, acc_rate=0.6)),
        "eagle3-k3": (cell("eagle3-k3", "eagle3", 3, family="eagle3"),
                      dict(base_step=0.012, per_k=0.004, acc_rate=1.5)),
        "dflash-k1": (cell("dflash-k1", "dflash", 1, family="dflash"),
                      dict(base_step=0.013, per_k=0.0, acc_rate=0.5)),
        "dflash-k3": (cell("dflash-k3", "dflash", 3, family="dflash"),
                      dict(base_step=0.013, per_k=0.0, acc_rate=1.2)),
    }
    cells, crs, reqs = [], [], []
    for name, (c, kw) in arms.items():
        # dflash-k3 measured one prompt the reference never did: pairing must leave it out
        prompts = PROMPTS + ["extra"] if name == "dflash-k3" else PROMPTS
        rs, cr = _arm(c, rng, prompts=prompts, **kw)
        cells.append(c)
        crs.append(cr)
        reqs += rs
    summary = metrics.summarize("r", "s", cells, crs, reqs)
    greqs = metrics.requests_by_group(cells, metrics.latest_cell_records(crs), metrics.unique_requests(reqs))
    summary.headline = comparison.headline_ratios(summary.groups, greqs, {"t": "eagle3"}, [
        {"target": "t", "method": "dflash", "metric": "speedup_ratio", "value": 1.1, "high": 1.3, "source": "paper"}])
    summary.k_sweeps = comparison.k_sweeps(summary.groups, greqs)
    return summary, greqs


def _pooled_tau(reqs: list[RequestRecord], prompts: set[str]) -> float:
    acc = sum(r.spec.num_accepted_tokens for r in reqs if r.prompt_id in prompts and r.spec)
    drafts = sum(r.spec.num_drafts for r in reqs if r.prompt_id in prompts and r.spec)
    return 1 + acc / drafts


def _rate(reqs: list[RequestRecord], prompts: set[str]) -> float:
    mine = [r for r in reqs if r.prompt_id in prompts]
    return sum(r.num_output_tokens for r in mine) / sum(r.latency_s or 0 for r in mine)


def test_headline_ratios_recompute_by_hand_over_shared_prompts(run):
    summary, greqs = run
    (row,) = [r for r in summary.headline if r.reference != "baseline"]
    assert (row.method, row.reference) == ("dflash", "eagle3")
    m, ref = greqs[row.method_group], greqs[row.reference_group]
    shared = {r.prompt_id for r in m} & {r.prompt_id for r in ref}
    assert "extra" not in shared and len(shared) == len(PROMPTS) == row.n_prompts
    assert row.tau_ratio.value == pytest.approx(_pooled_tau(m, shared) / _pooled_tau(ref, shared), rel=1e-12)
    assert row.speedup_ratio.value == pytest.approx(_rate(m, shared) / _rate(ref, shared), rel=1e-12)
    assert row.speedup_ratio.n == len(shared) and row.tau_ratio.n == len(shared)
    for est in (row.tau_ratio, row.speedup_ratio):
        assert est.ci_low < est.value < est.ci_high
    assert row.verdict == comparison.speedup_ratio_verdict(row.speedup_ratio)
    assert [c.source for c in row.published] == ["paper"]


def test_each_arm_is_taken_at_its_best_k(run):
    summary, _ = run
    (row,) = [r for r in summary.headline if r.reference != "baseline"]
    by_id = {g.group_id: g for g in summary.groups}
    for fam, gid in (("dflash", row.method_group), ("eagle3", row.reference_group)):
        fam_groups = [g for g in summary.groups if g.family == fam]
        assert by_id[gid].output_tps.value == max(g.output_tps.value for g in fam_groups)


def test_verdicts():
    from specbench.stats import Estimate

    assert comparison.speedup_ratio_verdict(Estimate(value=1.3, ci_low=1.1, ci_high=1.5)) == "faster"
    assert comparison.speedup_ratio_verdict(Estimate(value=0.8, ci_low=0.7, ci_high=0.9)) == "slower"
    assert comparison.speedup_ratio_verdict(Estimate(value=1.1, ci_low=0.9, ci_high=1.3)) == "not distinguishable"
    assert comparison.speedup_ratio_verdict(Estimate(value=None)) == "no data"


def test_step_time_is_decode_time_over_verification_steps(run):
    summary, greqs = run
    g = next(g for g in summary.groups if g.method == "eagle3-k3")
    reqs = greqs[g.group_id]
    by_hand = sum(r.latency_s - r.ttft_s for r in reqs) / sum(r.spec.num_drafts for r in reqs)
    assert g.step_time_s.value == pytest.approx(by_hand)
    base = next(g for g in summary.groups if g.method_kind == "baseline")
    breqs = greqs[base.group_id]
    assert base.step_time_s.value == pytest.approx(
        sum(r.latency_s - r.ttft_s for r in breqs) / sum(r.num_output_tokens - 1 for r in breqs))
    assert base.tpot_s.value == pytest.approx(base.step_time_s.value)
    assert step_time.decode_time(reqs[0].model_copy(update={"ttft_s": None})) is None


def test_step_time_slope_separates_autoregressive_from_parallel(run):
    summary, _ = run
    sweeps = {s.method: s for s in summary.k_sweeps}
    assert set(sweeps) == {"eagle3", "dflash"}
    e, d = sweeps["eagle3"].step_time_slope_s, sweeps["dflash"].step_time_slope_s
    assert e.value == pytest.approx(0.004, rel=0.3) and e.ci_low > 0
    assert d.ci_low < 0 < d.ci_high or abs(d.value) < 0.001
    assert e.ci_low > d.ci_high
    assert e.n == len(PROMPTS)  # prompts measured at every K
    assert [p.k for p in sweeps["eagle3"].points] == [1, 3]
    assert sweeps["eagle3"].best_k.value in (1.0, 3.0)


def test_verification_spent(run):
    summary, greqs = run
    g = next(g for g in summary.groups if g.method == "eagle3-k3")
    reqs = greqs[g.group_id]
    v = g.verification
    assert v.drafted_per_step.value == pytest.approx(3.0)
    drafted = sum(r.spec.num_draft_tokens for r in reqs)
    acc = sum(r.spec.num_accepted_tokens for r in reqs)
    assert v.accepted_per_verified.value == pytest.approx(acc / drafted)
    assert v.wasted_per_emitted.value == pytest.approx((drafted - acc) / sum(r.num_output_tokens for r in reqs))


def test_gate_ratio_rule(run):
    summary, _ = run
    (row,) = [r for r in summary.headline if r.reference != "baseline"]
    lo, hi = row.speedup_ratio.ci_low, row.speedup_ratio.ci_high
    ok = GateRules.model_validate({"ratios": [{"method": "dflash", "over": "eagle3", "min": lo * 0.99}]})
    assert evaluate_gate(summary, summary, ok).exit_code == 0
    bad = GateRules.model_validate({"ratios": [{"method": "dflash", "over": "eagle3", "min": hi * 1.01}]})
    res = evaluate_gate(summary, summary, bad)
    assert res.exit_code == 1 and any(c.metric == "speedup_ratio" and not c.passed for c in res.checks)
    strict = GateRules.model_validate({"ratios": [{"method": "dflash", "min": (lo + hi) / 2, "require": "above"}]})
    assert evaluate_gate(summary, summary, strict).exit_code == 1
    # A rule about a pair (or a target) the run does not compare does not apply: a warning, not a failure,
    # so one rules file serves a CPU smoke run and a GPU suite alike.
    none = GateRules.model_validate({"ratios": [{"method": "p-eagle", "min": 1.0}]})
    res = evaluate_gate(summary, summary, none)
    assert res.exit_code == 0 and any("does not apply" in w for w in res.warnings)
    where = GateRules.model_validate({"ratios": [{"method": "dflash", "min": hi * 1.01, "where": "t/other/*"}]})
    res = evaluate_gate(summary, summary, where)
    assert res.exit_code == 0 and any("does not apply" in w for w in res.warnings)


def test_compare_shows_ratios(run):
    from specbench.regression.run_diff import compare_runs, render_comparison_markdown

    summary, _ = run
    comp = compare_runs(summary, summary)
    assert {c.metric.rsplit(":", 1)[1] for c in comp.ratios} == {"speedup_ratio", "tau_ratio"}
    assert "Ratios against the reference method" in render_comparison_markdown(comp)


def test_report_opens_with_the_headline_and_draws_it(run):
    from specbench.report import fmt_speedup, make_figures, render_markdown

    summary, _ = run
    md = render_markdown(summary)
    assert md.index("## Methods against the reference") < md.index("## Results")
    head = md[md.index("## Methods against the reference"):md.index("## Results")]
    (row,) = [r for r in summary.headline if r.reference != "baseline"]
    assert f"| dflash | {row.method_k} | eagle3 ({row.reference_k}) | 8 | {fmt_speedup(row.speedup_ratio)} |" in head
    assert "speedup 1.1–1.3× (ref. 1)" in head and "ref. 1: paper" in md
    assert "## K sweeps" in md and "Step-time slope (ms/K)" in md and "## Verification spent" in md
    assert "Output tok/s per request" in md and "Aggregate tok/s" in md
    figs = make_figures(summary)
    assert {"headline", "step_time_vs_k"} <= set(figs) and all(p.startswith(b"\x89PNG") for p in figs.values())
