"""The K sweep predicted from one run, the step-time model and the dynamic-SD schedule, on hand-built
records (issue 37); the schedule validator against vLLM's own rules."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest

from specbench.analysis import k_prediction, k_schedule, step_time_model
from specbench.config.dynamic_sd import expand_schedule, validate_schedule
from specbench.results import counters
from specbench.results.records import RequestRecord, SpecCounters, StepTrace
from specbench.results.schedule_file import ScheduleFile, read_schedule, write_schedule
from specbench.results.summary import GroupSummary
from specbench.stats import Estimate

# -- hand-built records ---------------------------------------------------------------------------


def _record(cell: str, pid: str, accepted: list[int], k: int, decode_s: float, ttft: float = 0.01) -> RequestRecord:
    """A speculative request whose j-th step drafted ``k`` and accepted ``accepted[j]`` (no overcount)."""
    hist = [0] * (k + 1)
    for a in accepted:
        hist[a] += 1
    spec = counters.from_request(hist, k * len(accepted), k)
    committed = sum(a + 1 for a in accepted)
    return RequestRecord(run_id="r", cell_id=cell, engine_key="e", prompt_id=pid, prompt_tokens=5,
                         output_token_ids=list(range(committed + 1)), output_text="x", ttft_s=ttft,
                         latency_s=ttft + decode_s, spec=spec,
                         steps=StepTrace(drafted=[k] * len(accepted), accepted=accepted, complete=True, source="vllm"))


def _baseline(cell: str, pid: str, tokens: int, decode_s: float, ttft: float = 0.01) -> RequestRecord:
    return RequestRecord(run_id="r", cell_id=cell, engine_key="b", prompt_id=pid, prompt_tokens=5,
                         output_token_ids=list(range(tokens)), output_text="x", ttft_s=ttft, latency_s=ttft + decode_s)


def _group(gid: str, method: str, kind: str, k: int | None, batch: int, family: str | None = None,
           tau: Estimate | None = None) -> GroupSummary:
    return GroupSummary(group_id=gid, target="t", method=method, method_kind=kind, k=k, family=family, dataset="d",
                        temperature=0.0, batch_size=batch, status="ok", n_requests=1, tau=tau)


# -- τ(K) from the per-position counts --------------------------------------------------------------


def test_self_drafting_that_accepts_everything_predicts_k_plus_one_exactly():
    reqs = [_record("c", f"p{i}", [3] * (5 + i), 3, 0.1) for i in range(6)]
    pred = k_prediction.predict_workload(_group("t/self-draft/d/T0/b1", "self-draft", "draft_model", 3, 1), reqs)
    assert pred is not None and pred.drafter == "autoregressive"
    assert [pt.k for pt in pred.points] == [1, 2, 3]
    for pt in pred.points:
        assert (pt.tau.value, pt.tau.ci_low, pt.tau.ci_high) == (pt.k + 1, pt.k + 1, pt.k + 1)
        assert pt.tokens_per_step is not None and pt.tokens_per_step.value == pytest.approx(pt.k + 1)


def test_tau_at_each_k_is_one_plus_the_per_position_rates_summed():
    patterns = [[3, 1, 0, 2], [0, 0, 1], [2, 3, 3, 0, 1], [1, 1]]
    reqs = [_record("c", f"p{i}", acc, 3, 0.1) for i, acc in enumerate(patterns)]
    pooled = sum((r.spec for r in reqs if r.spec is not None), SpecCounters())
    # by hand: drafts 14 steps; position i accepted in the steps that accepted more than i drafts
    steps = [a for acc in patterns for a in acc]
    by_hand = [sum(a > i for a in steps) / len(steps) for i in range(3)]
    assert counters.per_position_rates(pooled) == pytest.approx(by_hand)
    rows = k_prediction.acceptance_rows(reqs, 3)
    for k in (1, 2, 3):
        assert k_prediction.predict_tau(rows, k).value == pytest.approx(1 + sum(by_hand[:k]))
    # at the source's own K the prediction is the measured τ, and tokens per step the measured one
    assert k_prediction.predict_tau(rows, 3).value == pytest.approx(counters.counters_tau(pooled))
    committed = sum(a + 1 for a in steps)
    assert k_prediction.predict_tokens_per_step(rows, 3, 3).value == pytest.approx(committed / len(steps))


def test_prediction_error_is_stated_beside_a_measured_k():
    reqs = [_record("c", f"p{i}", [3, 1, 0, 2] * 3, 3, 0.1) for i in range(4)]
    src = _group("t/eagle3-k3/d/T0/b1", "eagle3-k3", "eagle3", 3, 1, family="eagle3")
    measured = _group("t/eagle3-k1/d/T0/b1", "eagle3-k1", "eagle3", 1, 1, family="eagle3",
                      tau=Estimate(value=1.70, ci_low=1.60, ci_high=1.80, n=4))
    pred = k_prediction.predict_workload(src, reqs, [measured])
    assert pred is not None
    pt1 = pred.points[0]
    assert pt1.measured_group == measured.group_id and pt1.tau.value == pytest.approx(1.75)
    assert pt1.tau_error == pytest.approx(0.05) and pt1.tolerance == pytest.approx(0.10)
    errs = k_prediction.errors_by_drafter([pred])
    assert errs["autoregressive"]["n"] == 1 and errs["autoregressive"]["within"] == 1
    assert k_prediction.drafter("dflash") == "parallel" and k_prediction.drafter("ngram") == "lookup"


# -- the step-time model -------------------------------------------------------------------------

TRUE_M = (0.010, 0.001, 0.002, 0.004)  # method: a + b·K + c·n + d·K·n
TRUE_B = (0.010, 0.0, 0.002, 0.0)  # baseline: a + c·n
PATTERN = [3, 2, 1, 0]  # the K=3 arm's accepted drafts, cycled: rates 3/4, 2/4, 1/4


def _t(coef: tuple[float, ...], k: int, n: int) -> float:
    return coef[0] + coef[1] * k + coef[2] * n + coef[3] * k * n


def _lockstep(steps: list[int], k: int, coef: tuple[float, ...]) -> list[float]:
    """Decode times of one batch run in lockstep: step j holds the requests with more than j steps."""
    return [sum(_t(coef, k, sum(o > j for o in steps)) for j in range(s)) for s in steps]


def _arm(cell: str, k: int, batch: int, batches: int) -> list[RequestRecord]:
    out = []
    for b in range(batches):
        steps = [8 + 4 * i + b for i in range(batch)]
        for i, (s, d) in enumerate(zip(steps, _lockstep(steps, k, TRUE_M), strict=True)):
            acc = [min(k, a) for a in itertools.islice(itertools.cycle(PATTERN), s)]
            out.append(_record(cell, f"p{b}-{i}", acc, k, d))
    return out


def _base_arm(cell: str, batch: int, batches: int) -> list[RequestRecord]:
    out = []
    for b in range(batches):
        steps = [8 + 4 * i + b for i in range(batch)]
        out += [_baseline(cell, f"p{b}-{i}", s + 1, d) for i, (s, d) in enumerate(zip(steps, _lockstep(steps, 0, TRUE_B),
                                                                                    strict=True))]
    return out


def test_lockstep_batches_give_each_request_its_steps_batch_sizes_and_the_fit_recovers_the_model():
    reqs = _arm("c3", 3, 4, 3)
    rows, used = step_time_model.step_model_rows(reqs, 4, 3, speculative=True)
    assert used == reqs and rows.shape == (12, 5)
    s = [8, 12, 16, 20]
    assert rows[:4, step_time_model.N].tolist() == [sum(min(o, x) for o in s) for x in s]  # 8·4, 8+12·3, …
    both = np.concatenate([rows, step_time_model.step_model_rows(_arm("c1", 1, 4, 3), 4, 1, speculative=True)[0]])
    m = step_time_model.step_model(both)
    assert m is not None and m.k_identified and m.n_identified and m.n_max == 4 and m.ks == [1, 3]
    assert (m.a, m.b, m.c, m.d) == pytest.approx(TRUE_M)
    # one K only: no slope in K
    m3 = step_time_model.step_model(rows)
    assert m3 is not None and not m3.k_identified and m3.b == m3.d == 0


def test_schedule_picks_the_best_k_per_batch_size_and_stops_where_speculation_stops_paying():
    g1 = _group("t/e-k1/d/T0/b4", "e-k1", "eagle3", 1, 4, family="e")
    g3 = _group("t/e-k3/d/T0/b4", "e-k3", "eagle3", 3, 4, family="e")
    gb = _group("t/baseline/d/T0/b4", "baseline", "baseline", None, 4)
    reqs = {g1.group_id: _arm("c1", 1, 4, 3), g3.group_id: _arm("c3", 3, 4, 3), gb.group_id: _base_arm("cb", 4, 3)}
    sf = k_schedule.schedules("r", "s", [g1, g3, gb], reqs)
    (s,) = sf.schedules
    acc = [a for r in reqs[g3.group_id] if r.steps is not None for a in r.steps.accepted]
    tau = {k: 1 + sum(sum(a > i for a in acc) / len(acc) for i in range(k)) for k in range(4)}  # by hand
    truth = {(k, n): (tau[k] * _t(TRUE_B, 0, n) / _t(TRUE_M, k, n) if k else 1.0) for k in range(4) for n in range(1, 5)}
    for cell in s.grid:
        assert cell.speedup.value == pytest.approx(truth[(cell.k, cell.batch_size)])
    dense = expand_schedule(s.num_speculative_tokens_per_batch_size, 4, 3)
    for n in range(1, 5):
        best = max(truth[(k, n)] for k in range(4))
        assert truth[(dense[n], n)] >= best * (1 - k_schedule.TIE)
    assert s.num_speculative_tokens_per_batch_size[0][0] == 1 and dense[1] > 0
    assert s.stops_paying_at == min(n for n in range(1, 5) if dense[n] == 0)  # K·n costs: off at 4
    assert validate_schedule(s.num_speculative_tokens_per_batch_size, 3) == []
    assert s.speculative_config["num_speculative_tokens"] == 3
    assert all(r.runner_up_k is not None and r.runner_up_speedup is not None for r in s.ranges)


def test_schedule_file_round_trips(tmp_path: Path):
    sf = ScheduleFile(run_id="r", suite_name="s", predictions=[], schedules=[], skipped=["x: why"])
    assert read_schedule(write_schedule(tmp_path / "s.json", sf)) == sf


# -- the validator, by vLLM's rules ---------------------------------------------------------------


@pytest.mark.parametrize(("schedule", "needle"), [
    ([[2, 4, 3], [5, 8, 1]], "first range starts at 2"),
    ([[1, 4, 3], [4, 8, 1]], "overlap"),
    ([[1, 4, 5]], "above num_speculative_tokens"),
    ([[1, 4, 3], [5, 300, 0]], "passes max_num_seqs"),
])
def test_the_validator_catches_each_malformed_kind(schedule, needle):
    problems = validate_schedule(schedule, num_speculative_tokens=3, max_num_seqs=256)
    assert len(problems) == 1 and needle in problems[0], problems


def test_a_well_formed_schedule_has_no_problems_and_gaps_inherit_the_previous_k():
    sched = [[1, 2, 3], [5, 6, 1], [9, 9, 0]]
    assert validate_schedule(sched, num_speculative_tokens=3, max_num_seqs=12) == []
    assert expand_schedule(sched, 12, 3)[1:] == [3, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0]
    assert expand_schedule([[1, 4, 5]], 6, 3)[1:] == [3] * 6  # clamped, as vLLM does
    with pytest.raises(ValueError, match="overlap"):
        expand_schedule([[1, 4, 3], [3, 8, 1]], 8, 3)


def _vllm_lookup():
    """vLLM's own dense lookup, loaded from its file (no vLLM import)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        pytest.skip("vLLM is not installed")
    path = Path(spec.origin).parent / "v1" / "spec_decode" / "dynamic" / "utils.py"
    mod_spec = importlib.util.spec_from_file_location("vllm_dynamic_sd_utils", path)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod.build_dynamic_sd_schedule_lookup


@pytest.mark.parametrize("sched", [[[1, 2, 3], [5, 6, 1], [9, 9, 0]], [[1, 16, 3], [32, 128, 2]], [[1, 4, 5]],
                                   [[1, 3, 2], [4, 40, 0]], [[9, 12, 1], [1, 8, 3]]])
def test_expansion_matches_vllms_own_lookup(sched):
    assert expand_schedule(sched, 20, 3) == _vllm_lookup()(sched, 20, 3)


# -- K = 0 with the drafter loaded, and a schedule checked on the engine's records --------------------

SLOW_M = (0.014, 0.001, 0.002, 0.004)  # the drafter loaded costs 4 ms a step even at K = 0


def _off_arm(cell: str, batch: int, batches: int) -> list[RequestRecord]:
    """K = 0 with the drafter loaded: one token a step, no drafts, at SLOW_M's K = 0 time."""
    out = []
    for b in range(batches):
        steps = [8 + 4 * i + b for i in range(batch)]
        out += [_baseline(cell, f"p{b}-{i}", s + 1, d)
                for i, (s, d) in enumerate(zip(steps, _lockstep(steps, 0, SLOW_M), strict=True))]
    return out


def test_a_measured_k0_is_not_taken_as_free():
    """A group run with the drafter loaded and a schedule of zeros enters the step model at K = 0: its
    predicted speedup is the baseline's step time over its own (here below 1), and where no K reaches 1
    speculation stops paying even though K = 0 is not the best."""
    groups = {k: _group(f"t/e-k{k}/d/T0/b4", f"e-k{k}", "eagle3", k, 4, family="e") for k in (1, 3)}
    off = _group("t/e-off/d/T0/b4", "e-off", "eagle3", 3, 4).model_copy(update={"schedule": [(1, 4, 0)]})
    gb = _group("t/baseline/d/T0/b4", "baseline", "baseline", None, 4)
    reqs: dict[str, list[RequestRecord]] = {gb.group_id: _base_arm("cb", 4, 3), off.group_id: _off_arm("co", 4, 3)}
    for k, g in groups.items():
        arm = _arm(f"c{k}", k, 4, 3)
        for r in arm:  # SLOW_M's times
            steps = r.steps.accepted if r.steps else []
            r.latency_s = (r.ttft_s or 0) + (r.latency_s or 0) - (r.ttft_s or 0) + (SLOW_M[0] - TRUE_M[0]) * len(steps)
        reqs[g.group_id] = arm
    sf = k_schedule.schedules("r", "s", [*groups.values(), off, gb], reqs)
    (s,) = sf.schedules
    assert 0 in s.method_step_model.ks and s.method_step_model.a == pytest.approx(SLOW_M[0])
    for cell in s.grid:
        if cell.k == 0:
            n = cell.batch_size
            assert cell.speedup.value == pytest.approx(_t(TRUE_B, 0, n) / _t(SLOW_M, 0, n))
    assert any("K = 0 (the drafter loaded, no drafts) measured" in note for note in s.notes)
    best = {c.batch_size: max(x.speedup.value or 0 for x in s.grid if x.batch_size == c.batch_size) for c in s.grid}
    assert s.stops_paying_at == min((n for n, v in best.items() if v < 1), default=None)
    assert not sf.skipped  # the K = 0 group is the family's, not a workload of its own


def _scheduled(cell: str, schedule: list[tuple[int, int, int]], honour: bool) -> list[RequestRecord]:
    """One lockstep batch of 4 (steps 8, 12, 16, 20) whose step j drafts what ``schedule`` gives the
    requests still running then (``honour``), or always K = 3; every draft accepted half (rounded down)."""
    steps = [8, 12, 16, 20]
    dense = expand_schedule(schedule, 4, 3)
    out = []
    for i, s in enumerate(steps):
        ks = [dense[sum(o > j for o in steps)] if honour else 3 for j in range(s)]
        drafted = [k for k in ks if k > 0]
        acc = [k // 2 for k in drafted]
        committed = sum(a + 1 for a in acc) + (len(ks) - len(drafted))
        hist = [0] * 4
        for a in acc:
            hist[a] += 1
        out.append(RequestRecord(
            run_id="r", cell_id=cell, engine_key="s", prompt_id=f"p{i}", prompt_tokens=5,
            output_token_ids=list(range(committed + 1)), output_text="x", ttft_s=0.01, latency_s=0.01 + 0.01 * s,
            spec=counters.from_request(hist, sum(drafted), 3),
            steps=StepTrace(drafted=drafted, accepted=acc, complete=False, source="vllm")))
    return out


@pytest.mark.parametrize("honour", [True, False])
def test_the_schedule_check_sets_each_fixed_k_beside_the_schedule_and_sees_whether_vllm_honoured_it(honour):
    from specbench.analysis.schedule_check import check_schedules

    sched = [(1, 2, 1), (3, 4, 3)]
    sp = {1: (1.10, 1.05, 1.15), 3: (1.30, 1.20, 1.40)}
    fixed = [_group(f"t/e-k{k}/d/T0/b4", f"e-k{k}", "eagle3", k, 4, family="e").model_copy(
        update={"speedup": Estimate(value=v, ci_low=lo, ci_high=hi)}) for k, (v, lo, hi) in sp.items()]
    off = _group("t/e-off/d/T0/b4", "e-off", "eagle3", 3, 4).model_copy(
        update={"schedule": [(1, 4, 0)], "speedup": Estimate(value=0.8, ci_low=0.75, ci_high=0.85)})
    g = _group("t/e-sched/d/T0/b4", "e-sched", "eagle3", 3, 4).model_copy(
        update={"schedule": sched, "speedup": Estimate(value=1.25, ci_low=1.2, ci_high=1.3)})
    (c,) = check_schedules([*fixed, off, g], [], {g.group_id: _scheduled("cs", sched, honour)})
    assert [a.label for a in c.arms] == ["K=0 (drafter, no drafts)", "K=1", "K=3", "schedule"]
    assert c.family == "e" and c.best_fixed_k == 3 and c.within_best is True and c.model_batch_size == 4
    # steps by hand: 56 steps; n = 4 for j < 8, 3 for j < 12 (K = 3), 2 then 1 (K = 1)
    steps = [8, 12, 16, 20]
    want = [expand_schedule(sched, 4, 3)[sum(o > j for o in steps)] for s in steps for j in range(s)]
    assert c.drafted_per_step_expected == pytest.approx(sum(want) / len(want))
    assert c.k_share_expected == pytest.approx({k: want.count(k) / len(want) for k in set(want)})
    if honour:
        assert c.drafted_per_step == pytest.approx(c.drafted_per_step_expected)
        assert c.k_share == pytest.approx(c.k_share_expected)
    else:
        assert c.drafted_per_step == pytest.approx(3.0) and c.k_share == {3: 1.0}


def test_an_arms_predicted_tpot_is_the_models_step_time_over_its_predicted_tokens_per_step():
    from specbench.results.schedule_file import LoadArm

    arm = LoadArm(label="K=2", k=2, group_id="g", predicted_tokens_per_step=Estimate(value=1.6, ci_low=1.5, ci_high=1.7),
                  predicted_step_time_s=Estimate(value=0.008, ci_low=0.007, ci_high=0.009))
    assert arm.predicted_tpot_s == pytest.approx(0.005)
    assert LoadArm(label="K=1", k=1, group_id="g").predicted_tpot_s is None
