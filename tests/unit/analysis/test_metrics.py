"""Metrics on hand-built records with known answers."""

from support.factories import cell, cell_record, group, request

from specbench.analysis.cross_checks import counter_checks
from specbench.analysis.group_acceptance import acceptance
from specbench.analysis.metrics import greedy_match, paired_speedup, summarize
from specbench.results.records import SpecCounters


def req(cell_id, pid, toks, lat, spec=None, sample=0, repeat=0):
    return request(cell_id, pid, tokens=toks, latency_s=lat, spec=spec, sample_index=sample, repeat=repeat)


def test_tau_self_drafting_is_k_plus_one():
    # Every draft fully accepted: 10 rounds of K=3 → τ = 4 exactly, per position 1.
    per = SpecCounters(num_drafts=5, num_draft_tokens=15, num_accepted_tokens=15, accepted_per_pos=[5, 5, 5])
    pooled = per + per
    reqs = [req("c", "a", [1] * 20, 1.0, per), req("c", "b", [1] * 20, 1.0, per)]
    acc = acceptance(pooled, reqs, 3)
    assert acc.tau.value == 4.0 and acc.tau.ci_low == 4.0 and acc.tau.ci_high == 4.0
    assert [p.value for p in acc.per_position] == [1.0, 1.0, 1.0]
    assert acc.draft_acceptance_rate.value == 1.0


def test_tau_pooled_vs_per_request():
    # Request a: 1 draft, 0 accepted (τ 1); request b: 3 drafts, 9 accepted (τ 4).
    a = SpecCounters(num_drafts=1, num_draft_tokens=3, num_accepted_tokens=0, accepted_per_pos=[0, 0, 0])
    b = SpecCounters(num_drafts=3, num_draft_tokens=9, num_accepted_tokens=9, accepted_per_pos=[3, 3, 3])
    acc = acceptance(a + b, [req("c", "a", [1], 1.0, a), req("c", "b", [1] * 12, 1.0, b)], 3)
    assert acc.tau.value == 1 + 9 / 4  # pooled weighs the long request more
    assert acc.tau_per_request.value == (1.0 + 4.0) / 2
    assert acc.tau.n == 2
    assert acc.per_position[0].value == 3 / 4


def test_speedup_paired_and_known():
    base = [req("b", p, [1] * 10, 1.0) for p in "abcd"]
    fast = [req("m", p, [1] * 10, 0.5) for p in "abcd"]
    est = paired_speedup(fast, base)
    assert est.value == 2.0 and est.ci_low == 2.0 and est.n == 4


def test_greedy_match_counts_pairs():
    base = [req("b", p, [1, 2, 3], 1.0) for p in "abcd"]
    m = [req("m", "a", [1, 2, 3], 1.0), req("m", "b", [1, 2, 4], 1.0), req("m", "c", [1, 2, 3], 1.0)]
    est = greedy_match(m, base)
    assert est.n == 3 and abs(est.value - 2 / 3) < 1e-12
    assert est.ci_low < 2 / 3 < est.ci_high


def test_summarize_groups_baseline_and_checks():
    cb, cm, cs = cell("baseline", "baseline"), cell("eagle3", "eagle3", 3), cell("dspark", "dspark", 3)
    spec = SpecCounters(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=6, accepted_per_pos=[3, 2, 1])
    reqs = [req(cb.cell_id, "a", [1, 2, 3, 4], 1.0), req(cm.cell_id, "a", [1, 2, 3, 4], 0.5, spec)]
    cells = [
        cell_record(cb.cell_id, wall_time_s=1.0),
        cell_record(cm.cell_id, status="failed", reason="boom"),
        # a later attempt of the same cell wins (append-only records)
        cell_record(cm.cell_id, counters=spec, wall_time_s=0.5),
        cell_record(cs.cell_id, status="skipped", reason="GPU only"),
    ]
    s = summarize("r", "s", [cb, cm, cs], cells, reqs)
    g = s.group(cm.group_id)
    assert g.status == "ok" and g.tau.value == 1 + 6 / 4
    assert g.speedup.value == 2.0
    assert g.greedy_match.value == 1.0
    assert s.group(cs.group_id).status == "skipped" and s.group(cs.group_id).reasons == ["GPU only"]
    assert s.group(cb.group_id).tau is None
    checks = counter_checks(s.groups)
    assert checks and all(c.ok for c in checks)


def test_counter_checks_catch_inconsistency():
    cm = cell("eagle3", "eagle3", 3)
    bad = SpecCounters(num_drafts=2, num_draft_tokens=6, num_accepted_tokens=7, accepted_per_pos=[2, 2, 2])
    s = summarize(
        "r", "s", [cm],
        [cell_record(cm.cell_id, counters=bad, wall_time_s=1)],
        [req(cm.cell_id, "a", [1], 1.0)],
    )
    failed = {c.check for c in counter_checks(s.groups) if not c.ok}
    assert failed == {"accepted <= draft tokens", "per-position sum = accepted", "1 <= tau <= K+1"}


def test_cross_check_flags_non_overlapping_tau():
    from specbench.analysis.cross_checks import cross_check

    def grp(target, lo, hi):
        return tau_group(target, "eagle3", (lo + hi) / 2, kind="eagle3", half=(hi - lo) / 2)

    targets = target_specs([{"name": "v", "model": "tiny"}, {"name": "ref", "model": "tiny", "engine": "reference"}])
    agree = cross_check([grp("v", 2.0, 2.4), grp("ref", 2.2, 2.6)], targets)
    assert len(agree) == 1 and agree[0].flag is False
    flagged = cross_check([grp("v", 1.5, 1.8), grp("ref", 2.2, 2.6)], targets)
    assert flagged[0].flag is True and "mismatch" in flagged[0].note


def target_specs(targets: list[dict]) -> list:
    """Suite targets from their YAML dicts (one eagle3 method where none is given)."""
    from specbench.config.suite import TargetSpec

    return [TargetSpec.model_validate({"methods": [{"method": "eagle3"}], **t}) for t in targets]


def test_unique_requests_prefers_a_successful_retry():
    from specbench.analysis.metrics import unique_requests

    failed = req("c", "a", [1], 1.0).model_copy(update={"error": "timeout: no answer"})
    retry = req("c", "a", [1, 2], 1.0)
    other = req("c", "b", [3], 1.0)
    out = unique_requests([failed, other, retry, retry])
    assert len(out) == 2 and {r.prompt_id: r.error for r in out} == {"a": None, "b": None}


def tau_group(target: str, method: str, v: float, kind: str = "dflash", half: float = 0.1):
    """A greedy K=3 group with τ = v ± half (for cross-check tests)."""
    from specbench.stats import Estimate

    return group(method, kind, 3, target=target, tau=Estimate(value=v, ci_low=v - half, ci_high=v + half, n=8))


def test_cross_check_pairs_by_checkpoint_and_assets():
    from specbench.analysis.cross_checks import cross_check

    grp = tau_group

    methods = [{"name": "a", "method": "dflash", "speculator": "tiny:dflash"},
               {"name": "b", "method": "dflash", "speculator": "/ckpt/flipped"}]
    targets = target_specs([
        {"name": "v", "model": "tiny", "assets": "trained", "methods": methods},
        {"name": "ref", "model": "tiny", "assets": "trained", "engine": "reference", "methods": methods},
        {"name": "ref-quick", "model": "tiny", "assets": "quick", "engine": "reference", "methods": methods}])
    groups = [grp("v", "a", 2.0), grp("v", "b", 1.5), grp("ref", "a", 2.0), grp("ref", "b", 2.0),
              grp("ref-quick", "a", 1.0)]
    rows = cross_check(groups, targets)
    assert sorted((r.vllm_group, r.reference_group, r.flag) for r in rows) == [
        ("v/a/d/T0/b1", "ref/a/d/T0/b1", False),
        ("v/b/d/T0/b1", "ref/b/d/T0/b1", True),
    ]


def test_cross_check_reports_a_served_attention_mismatch_beside_the_tau_test():
    """The config fact is reported whether or not τ shows it; ``flag`` stays the τ test."""
    from specbench.analysis.cross_checks import cross_check

    grp = tau_group
    methods = [{"name": "same", "method": "dflash", "speculator": "/ckpt/causal"},
               {"name": "drop", "method": "dflash", "speculator": "/ckpt/causal2"},
               {"name": "ok", "method": "dflash", "speculator": "/ckpt/ok"}]
    targets = target_specs([{"name": "v", "model": "tiny", "methods": methods},
                            {"name": "ref", "model": "tiny", "engine": "reference", "methods": methods}])
    groups = [grp("v", "same", 2.0), grp("ref", "same", 2.0), grp("v", "drop", 1.5), grp("ref", "drop", 2.0),
              grp("v", "ok", 2.0), grp("ref", "ok", 2.0)]
    why = "vLLM serves causal draft blocks (…) but the drafter was trained with non-causal blocks"
    attention = {("v", m): {"served": "causal", "trained": "non-causal", "mismatch": True, "why": why}
                 for m in ("same", "drop")}
    attention[("v", "ok")] = {"served": "non-causal", "trained": "non-causal", "mismatch": False, "why": ""}
    attention[("ref", "same")] = attention[("v", "same")]  # the reference side is never read
    rows = {r.method: r for r in cross_check(groups, targets, attention)}
    assert (rows["same"].flag, rows["drop"].flag, rows["ok"].flag) == (False, True, False)
    assert rows["same"].config_mismatch == why and rows["drop"].config_mismatch == why
    assert rows["ok"].config_mismatch is None and rows["ok"].note == ""
    assert "τ agrees" in rows["same"].note and "engine bug" in rows["drop"].note
    assert cross_check(groups, targets)[0].config_mismatch is None


def test_a_stopped_cell_reports_its_confidence_sequence_where_the_metric_is_computed():
    """τ, TPOT and speedup of a group whose one cell stopped early are the confidence sequence at the
    prompts it used (not the bootstrap); the baseline keeps its own; without a stop, the bootstrap."""
    from specbench.analysis.cell_stopper import stopped_interval
    from specbench.analysis.group_acceptance import sum_counters
    from specbench.analysis.metrics import summarize_groups
    from specbench.config.stop_rule import StopRecord, StopRule

    cb, cm = cell("baseline", "baseline"), cell("eagle3", "eagle3", 3)
    specs = [SpecCounters(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=a, accepted_per_pos=[a, 0, 0])
             for a in (1, 2, 3, 4, 2, 3, 1, 4)]
    pids = [f"p{i}" for i in range(len(specs))]
    base = [req(cb.cell_id, p, [1] * 8, 1.0 + i / 10) for i, p in enumerate(pids)]
    meth = [req(cm.cell_id, p, [1] * 8, 0.5 + i / 20, s) for i, (p, s) in enumerate(zip(pids, specs, strict=True))]
    for r in [*base, *meth]:
        r.ttft_s = 0.1
    pooled = sum_counters(specs)
    stop = StopRecord(rule=StopRule(metric="tau", rel_half_width=0.5, min_prompts=4), order_seed=7, n_used=8,
                      n_available=8, reason="target", estimate=2.0, lo=1.5, hi=2.5, half_width=0.5,
                      target_half_width=1.0, interval="asymptotic-cs")

    def records(with_stop):
        return [cell_record(cb.cell_id, wall_time_s=4.0),
                cell_record(cm.cell_id, counters=pooled, wall_time_s=2.0, stop=stop if with_stop else None)]

    stopped = {g.group_id: g for g in summarize_groups([cb, cm], records(True), [*base, *meth])}
    plain = {g.group_id: g for g in summarize_groups([cb, cm], records(False), [*base, *meth])}
    g, p = stopped[cm.group_id], plain[cm.group_id]
    for metric, field in (("tau", "tau"), ("tpot", "tpot_s"), ("speedup", "speedup")):
        cs = stopped_interval(stop, meth, base, {}, metric)
        assert cs is not None and cs.method == "asymptotic-cs"
        assert getattr(g, field) == cs, metric
        assert getattr(p, field).method != "asymptotic-cs", metric
    assert stopped[cb.group_id].tpot_s == plain[cb.group_id].tpot_s  # the baseline did not stop
