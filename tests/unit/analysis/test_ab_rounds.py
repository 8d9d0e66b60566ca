"""An A/B run's records as paired rounds (hand-built records; issue 36): the per-round metrics, their
log B/A by group, the pooled verdict per method, and the deterministic comparisons."""

from __future__ import annotations

import math

import pytest
from support.factories import cell_record, counters, request

from specbench.analysis.ab_decision import ABRule
from specbench.analysis.ab_rounds import (
    ab_result,
    arm_vllm_versions,
    exact_comparisons,
    group_of,
    paired_rounds,
    round_values,
)
from specbench.results.manifest import RunManifest

RULE = ABRule(min_rounds=4, planned_rounds=4, max_rounds=20)


def _rec(arm: str, rnd: int, slow: float, prompt: str = "p0", method: str = "baseline", tokens=11, **kw):
    # 11 tokens: 10 after the first; decode time 1 s × slow → TPOT 0.1 × slow, latency 1.2 × slow.
    return request(f"tiny@{arm}/{method}/he/T0/b1/r0", prompt, tokens=tokens, round=rnd,
                   ttft_s=0.2 * slow, latency_s=1.2 * slow, **kw)


def test_round_values_follow_the_documented_definitions() -> None:
    v = round_values([_rec("a", 0, 1.0), _rec("a", 0, 2.0, "p1")], speculative=False)
    assert v["tpot_s"] == pytest.approx((1.0 + 2.0) / 20)
    assert v["step_time_s"] == pytest.approx(v["tpot_s"])  # the baseline: one token per step
    assert v["output_tps"] == pytest.approx(22 / 3.6)
    assert round_values([_rec("a", 0, 1.0, error="boom")], speculative=False) == {}


def test_groups_pair_by_id_without_the_arm_and_rounds_by_index() -> None:
    assert group_of("tiny@b/eagle3/he/T0/b1/r0") == ("tiny/eagle3/he/T0/b1", "b")
    assert group_of("tiny/eagle3/he/T0/b1/r0") == ("tiny/eagle3/he/T0/b1", None)
    recs = [_rec("a", r, 1.0) for r in range(3)] + [_rec("b", r, 1.1) for r in range(2)]
    paired = paired_rounds(recs)
    assert paired["tpot_s"]["tiny/baseline/he/T0/b1"] == pytest.approx([math.log(1.1)] * 2)  # round 2: A only
    assert paired["output_tps"]["tiny/baseline/he/T0/b1"] == pytest.approx([-math.log(1.1)] * 2)


def test_a_planted_slowdown_is_different_and_identical_arms_are_not() -> None:
    jitter = [1.0, 1.02, 0.99, 1.01, 0.98, 1.03, 1.0, 0.97, 1.01, 1.02, 0.99, 1.0]
    slow = [_rec("a", r, j) for r, j in enumerate(jitter)] + [_rec("b", r, j * 1.2) for r, j in enumerate(jitter[::-1])]
    res = ab_result(slow, [], RULE, ["tpot_s", "output_tps"])
    assert {v.metric: v.verdict for v in res.groups} == {"tpot_s": "different", "output_tps": "different"}
    assert res.regressions and res.rounds_run == 12
    same = [_rec("a", r, j) for r, j in enumerate(jitter)] + [_rec("b", r, j * 1.001) for r, j in enumerate(jitter[::-1])]
    verdicts = {v.verdict for v in ab_result(same, [], RULE, ["tpot_s"]).groups}
    assert "different" not in verdicts


def test_methods_pool_their_groups_round_by_round() -> None:
    recs = []
    for b in (1, 4):
        for r in range(6):
            j = 1 + 0.01 * ((r * b) % 3)
            for arm, f in (("a", 1.0), ("b", 1.15)):
                recs.append(request(f"tiny@{arm}/eagle3/he/T0/b{b}/r0", "p0", tokens=11, round=r,
                                    ttft_s=0.2 * j * f, latency_s=1.2 * j * f))
    res = ab_result(recs, [], RULE, ["tpot_s"])
    assert res.pooled_ids == ["tiny/eagle3"] and res.pooled[0].groups == 2 and res.pooled[0].rounds == 6
    assert res.pooled[0].ratio.value == pytest.approx(1.15)


def test_exact_comparisons_give_tau_per_arm_and_token_identity() -> None:
    cid = "tiny@{}/eagle3/he/T0/b1/r0"
    cells = [cell_record(cid.format("a"), counters=counters(60, 30)), cell_record(cid.format("b"), counters=counters(45, 30))]
    recs = [request(cid.format("a"), "p0", tokens=[1, 2, 3]), request(cid.format("b"), "p0", tokens=[1, 2, 3]),
            request(cid.format("a"), "p1", tokens=[1, 2]), request(cid.format("b"), "p1", tokens=[1, 9])]
    (g,) = exact_comparisons(recs, cells)
    assert (g.tau_a, g.tau_b) == (3.0, 2.5) and (g.identical, g.compared) == (1, 2) and not g.tau_equal


def test_each_arm_says_which_vllm_its_engines_ran() -> None:
    """An arm's interpreter may carry another vLLM release than the harness: the engines report theirs."""
    man = RunManifest.load({"run_id": "r", "suite_name": "s", "engines": [
        {"key": "tiny@a--baseline", "describe": {"engine": "vllm-offline", "vllm_version": "0.32.0"}},
        {"key": "tiny@a--eagle3", "describe": {"engine": "vllm-offline", "vllm_version": "0.32.0"}},
        {"key": "tiny@b--baseline", "describe": {"engine": "vllm-offline", "vllm_version": "0.31.0"}},
        {"key": "tiny@b--eagle3", "status": "skipped", "describe": None},
        {"key": "tiny--baseline", "describe": {"engine": "vllm-offline", "vllm_version": "0.32.0"}},  # not an arm
    ]})
    assert arm_vllm_versions(man) == {"a": "0.32.0", "b": "0.31.0"}
