"""An A/B run's schedule (issue 36): each engine and its counterpart in the other arm resident together,
the arms alternating round by round (ABBA) from a seeded phase, and the round hook's decisions."""

from __future__ import annotations

from collections import Counter

import pytest
from support.factories import request

from specbench.analysis.ab_decision import ABRule
from specbench.config.plan import EngineConfig
from specbench.config.suite import MethodSpec, TargetSpec
from specbench.engines.factory import ResolvedEngine
from specbench.execution.ab_round_decisions import RoundDecisions
from specbench.execution.jobs import EngineJob
from specbench.execution.round_schedule import ab_round_order, batch_order
from specbench.execution.rounds import pair_key, resident_sets


def _job(target: str, method: str) -> EngineJob:
    m = MethodSpec(method=method)
    cfg = EngineConfig(key=f"{target}--{method}", target=TargetSpec(name=target, model="m", methods=[m]), method=m,
                       vllm_method=None, speculative_config=None)
    eng = ResolvedEngine(config=cfg, model_path="m", speculator_path=None, engine_kwargs={}, env={})
    return EngineJob(job_id=cfg.key, run_id="r", run_dir="/tmp", platform="cpu", engine=eng, rounds=4)


def test_pairs_stay_together_in_resident_sets() -> None:
    jobs = [_job(f"tiny@{arm}", m) for m in ("eagle3", "baseline", "dflash") for arm in "ba"]
    assert pair_key(jobs[0]) == "tiny--eagle3"
    for cap in (2, 3, 4, 6):
        sets = resident_sets(jobs, cap)
        for s in sets:
            assert Counter(pair_key(j) for j in s) == {k: 2 for k in {pair_key(j) for j in s}}  # both arms of each
        assert [j.engine.config.method.method for j in sets[0][:2]] == ["baseline", "baseline"]


def test_arms_alternate_abba_and_each_goes_first_half_the_time() -> None:
    keys = [f"tiny@{arm}--{m}" for m in ("baseline", "eagle3") for arm in "ab"]
    pairs = {k: k.replace("@a", "").replace("@b", "") for k in keys}
    arms = {k: k.split("@")[1][0] for k in keys}
    orders = [ab_round_order(keys, pairs, arms, r, seed=3) for r in range(8)]
    assert all(sorted(o) == sorted(keys) for o in orders)
    for unit in set(pairs.values()):
        firsts = [next(arms[k] for k in o if pairs[k] == unit) for o in orders]
        assert firsts[0::2] == [firsts[0]] * 4 and firsts[1::2] == [firsts[1]] * 4 and firsts[0] != firsts[1]
        for o in orders:  # a pair's two engines run back to back
            i = [n for n, k in enumerate(o) if pairs[k] == unit]
            assert i[1] == i[0] + 1
    assert orders == [ab_round_order(keys, pairs, arms, r, seed=3) for r in range(8)]


def _round(r: int, slow_b: float) -> list:
    out = []
    for arm, f, step in (("a", 1.0, 7), ("b", slow_b, 3)):
        j = 1 + 0.02 * ((r * step) % 5)  # each arm its own round-to-round noise
        out.append(request(f"tiny@{arm}/baseline/he/T0/b1/r0", f"p{r}", tokens=11, round=r,
                           ttft_s=0.2 * j * f, latency_s=1.2 * j * f))
    return out


def test_a_pairs_round_alternates_by_batch_and_covers_the_span_once() -> None:
    # batch 1, prompts 8..12: A B | B A | A B | B A — each arm first in half the batches
    order = batch_order((8, 12), 1)
    assert order == [((8, 9), (0, 1)), ((9, 10), (1, 0)), ((10, 11), (0, 1)), ((11, 12), (1, 0))]
    # batch 4 with a short last batch: whole batches, as one go would send them
    assert batch_order((0, 10), 4) == [((0, 4), (0, 1)), ((4, 8), (1, 0)), ((8, 10), (0, 1))]
    assert batch_order((3, 3), 4) == []
    # a normal run's slot (the baseline, a method and its reference on the same prompts): forwards, then
    # backwards, so over two batches every engine has the same mean place
    assert batch_order((0, 8), 4, 3) == [((0, 4), (0, 1, 2)), ((4, 8), (2, 1, 0))]


def test_decided_groups_get_no_more_rounds_and_the_budget_ends_them_all() -> None:
    rule = ABRule(min_rounds=4, planned_rounds=4, max_rounds=30)
    hook = RoundDecisions(rule, ["tpot_s"])
    done: set[str] = set()
    for r in range(30):
        done = hook(r, _round(r, 1.3))
        if done:
            break
    assert done == {"tiny@a/baseline/he/T0/b1/r0", "tiny@b/baseline/he/T0/b1/r0"} and hook.rounds == 4
    spent = RoundDecisions(rule, ["tpot_s"], budget_s=0.0)
    assert spent(0, _round(0, 1.0)) == {"tiny@a/baseline/he/T0/b1/r0", "tiny@b/baseline/he/T0/b1/r0"}
    assert spent.budget_ended


@pytest.mark.parametrize("slow", [1.0])
def test_an_undecided_group_keeps_its_rounds(slow: float) -> None:
    hook = RoundDecisions(ABRule(min_rounds=4, planned_rounds=4, max_rounds=30), ["tpot_s"])
    assert all(hook(r, _round(r, slow)) == set() for r in range(3))  # before the first verdict
