"""Issue 22: the round schedule (split, order, resident sets), the suite check, and round-aware speed numbers
(hand-built records)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.factories import group, request
from support.paths import SUITES

from specbench.analysis.method_comparison import best_k_wins
from specbench.analysis.metrics import paired_speedup
from specbench.config.plan import round_order, round_spans
from specbench.config.suite import SuiteError, load_suite
from specbench.engines.factory import ResolvedEngine
from specbench.execution.jobs import EngineJob
from specbench.execution.rounds import resident_cap, resident_sets
from specbench.results.records import RequestRecord


def test_rounds_split_the_prompts_in_whole_batches_without_repeating_any() -> None:
    assert round_spans(16, 4, 4) == [(0, 4), (4, 8), (8, 12), (12, 16)]
    assert round_spans(8, 3, 2) == [(0, 4), (4, 8)]  # 4 batches in 3 rounds: 2 per round, the third empty
    assert round_spans(10, 3, 1) == [(0, 4), (4, 8), (8, 10)]
    assert round_spans(3, 4, 4) == [(0, 3)]  # one batch: one round
    assert round_spans(0, 4, 4) == []
    for n, r, b in ((16, 4, 4), (17, 4, 4), (9, 2, 1), (30, 7, 4)):
        spans = round_spans(n, r, b)
        assert [i for a, z in spans for i in range(a, z)] == list(range(n))  # each prompt once, in order
        assert all((z - a) % b == 0 for a, z in spans[:-1])  # whole batches except the last


def test_round_order_is_seeded_and_changes_per_round() -> None:
    keys = [f"tiny--m{i}" for i in range(5)]
    orders = [round_order(keys, r, seed=7) for r in range(6)]
    assert all(sorted(o) == sorted(keys) for o in orders)
    assert orders == [round_order(keys, r, seed=7) for r in range(6)]  # the same seed, the same schedule
    assert len({tuple(o) for o in orders}) > 1
    assert len({o[-1] for o in orders}) > 1  # not always the same engine last
    assert round_order(keys, 0, seed=8) != round_order(keys, 0, seed=7) or round_order(keys, 1, 8) != orders[1]


def _job(key: str, method: str, kv: str = "1", tf: bool = False, platform: str = "cpu") -> EngineJob:
    from specbench.config.plan import EngineConfig
    from specbench.config.suite import MethodSpec, TargetSpec

    m = MethodSpec(method=method)
    cfg = EngineConfig(key=key, target=TargetSpec(name="t", model="m", methods=[m]), method=m,
                       vllm_method=None, speculative_config=None)
    eng = ResolvedEngine(config=cfg, model_path="m", speculator_path=None, engine_kwargs={},
                         env={"VLLM_CPU_KVCACHE_SPACE": kv})
    return EngineJob(job_id=key, run_id="r", run_dir="/tmp", platform=platform, engine=eng,
                     teacher_forcing_after=tf, rounds=4)


def test_resident_set_is_capped_by_measured_memory() -> None:
    jobs = [_job("b", "baseline"), *(_job(f"m{i}", "ngram") for i in range(5))]
    assert resident_cap(jobs, free_gib=10.0) == 4  # 0.8 × 10 GiB / (1 GiB KV + 1 GiB)
    assert resident_cap(jobs, free_gib=1.0) == 1
    assert resident_cap([*jobs, _job("big", "ngram", kv="4")], free_gib=10.0) == 1  # 5 GiB each: 8 // 5
    sets = resident_sets(jobs, 4)
    assert [len(s) for s in sets] == [4, 2] and sets[0][0].job_id == "b"  # the baseline measured with the first set
    # A baseline that teacher-forces the target's outputs afterwards runs in the last set.
    tf = [_job("b", "baseline", tf=True), *(_job(f"m{i}", "ngram") for i in range(5))]
    assert resident_sets(tf, 4)[-1][0].job_id == "b"
    gpu = [_job("b", "baseline", platform="cuda"), _job("m", "ngram", platform="cuda")]
    assert resident_cap(gpu, free_gib=100.0) == 1  # 0.9 of the GPU each: one at a time


def test_a_speed_stop_rule_and_rounds_are_a_suite_error(tmp_path: Path) -> None:
    text = (SUITES / "cpu-tour.yaml").read_text()
    (tmp_path / "ok.yaml").write_text(text + "\nrounds: 4\nstop: {metric: tau, rel_half_width: 0.05}\n")
    assert load_suite(tmp_path / "ok.yaml").rounds == 4
    (tmp_path / "bad.yaml").write_text(text + "\nrounds: 4\nstop: {metric: speedup, rel_half_width: 0.05}\n")
    with pytest.raises(SuiteError, match="rounds"):
        load_suite(tmp_path / "bad.yaml")


def rec(cell: str, prompt: str, rnd: int | None, tokens: int, latency: float) -> RequestRecord:
    return request(cell, prompt, tokens=[1] * tokens, engine_key=cell, round=rnd, latency_s=latency, ttft_s=0.01)


def test_speedup_pairs_rounds_and_widens_with_drift_between_them() -> None:
    # 4 rounds × 4 prompts; the method is 2× the baseline in every round, the machine drifts ±20 % by round,
    # and both arms of a round drift together: the paired speedup holds, its interval says 4 rounds.
    drift = [1.0, 1.2, 0.8, 1.1]
    m, b = [], []
    for r, f in enumerate(drift):
        for p in range(4):
            pid = f"p{4 * r + p}"
            b.append(rec("b", pid, r, 40, f * (1.0 + 0.05 * p)))
            m.append(rec("m", pid, r, 40, f * (0.5 + 0.025 * p)))
    sp = paired_speedup(m, b)
    assert sp.value == pytest.approx(2.0) and sp.rounds == 4 and sp.method == "round bootstrap"
    assert sp.contains(2.0)
    # Unpaired drift (the method's rounds slowed, not the baseline's) moves whole rounds: a wide interval.
    m_slow = [x.model_copy(update={"latency_s": (x.latency_s or 0) * (1.3 if x.round in (1, 3) else 1.0)})
              for x in m]
    wide = paired_speedup(m_slow, b)
    no_rounds = paired_speedup([x.model_copy(update={"round": None}) for x in m_slow],
                               [x.model_copy(update={"round": None}) for x in b])
    assert wide.rounds == 4 and no_rounds.rounds is None
    assert wide.ci_high is not None and wide.ci_low is not None
    assert no_rounds.ci_high is not None and no_rounds.ci_low is not None
    assert wide.ci_high - wide.ci_low > no_rounds.ci_high - no_rounds.ci_low


def test_best_k_reports_how_often_it_wins_a_round() -> None:
    g1, g3 = (group(f"m-k{k}", "eagle3", k, family="m") for k in (1, 3))
    # K=3 is faster in rounds 0, 1, 2; K=1 in round 3.
    lat3 = {0: 0.5, 1: 0.5, 2: 0.5, 3: 1.5}
    reqs = {g1.group_id: [rec("c1", f"p{r}", r, 40, 1.0) for r in range(4)],
            g3.group_id: [rec("c3", f"p{r}", r, 40, lat3[r]) for r in range(4)]}
    wins = best_k_wins([g1, g3], reqs, 3.0)
    assert wins is not None and wins.value == 0.75 and wins.n == 4 and wins.method == "wilson"
    no_rounds = {gid: [r.model_copy(update={"round": None}) for r in rs] for gid, rs in reqs.items()}
    assert best_k_wins([g1, g3], no_rounds, 3.0) is None


def test_a_request_rate_cells_round_runs_as_one_stream_and_a_closed_loop_alternates_by_batch() -> None:
    from specbench.execution.round_schedule import batch_order, interleave_unit

    span = (16, 32)
    closed = batch_order(span, interleave_unit(span, 4, None), 3)
    assert [c for c, _ in closed] == [(16, 20), (20, 24), (24, 28), (28, 32)]
    assert [o for _, o in closed] == [(0, 1, 2), (2, 1, 0)] * 2
    rate = batch_order(span, interleave_unit(span, 1, 6.0), 3)  # a rate cell's batch unit is 1 prompt
    assert rate == [((16, 32), (0, 1, 2))]
