"""The speed estimators (specbench.results.speed_estimators): each formula on known numbers, and each one the
only place its ratio is computed — patched with a sentinel, the sentinel shows up in every consumer."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from support.factories import cell, cell_record, request

from specbench.analysis.group_acceptance import sum_counters
from specbench.config.plan import Cell
from specbench.results import speed_estimators
from specbench.results.records import RequestRecord, SpecCounters, StepTrace

# -- each formula, on numbers and arrays ----------------------------------------------------------


def test_each_estimator_on_known_numbers() -> None:
    se = speed_estimators
    assert se.token_rate(120, 2.0) == 60.0
    assert se.throughput_ratio(120, 2.0, 60, 2.0) == 2.0  # method first, then the baseline
    assert se.tpot(0.5, 25) == 0.02
    assert se.tpot_ratio(0.5, 25, 1.0, 25) == 2.0  # the baseline's TPOT over the method's: > 1 is faster
    assert se.step_time(0.6, 20) == pytest.approx(0.03)
    assert se.round_log_ratio(3.0, 1.5) == pytest.approx(math.log(2.0))  # log(method / baseline)
    assert se.goodput(6, 2.0) == 3.0
    assert se.goodput_ratio(8, 2.0, 4, 4.0) == 4.0
    assert se.predicted_speedup(3.0, 0.02, 0.03) == pytest.approx(2.0)
    a = np.array([2.0, 4.0])
    assert list(se.token_rate(a, np.array([1.0, 2.0]))) == [2.0, 2.0]
    assert list(se.throughput_ratio(a, 1.0, np.array([1.0, 1.0]), 1.0)) == [2.0, 4.0]
    assert list(se.round_log_ratio(a, a)) == [0.0, 0.0]


# -- one function per estimator: patch it, find the sentinel in every consumer ---------------------

SENTINEL = {  # none of them a real value of these records
    "throughput_ratio": 7.25,
    "token_rate": 777.0,
    "tpot": 0.0625,
    "tpot_ratio": 6.5,
    "step_time": 0.03125,
    "round_log_ratio": 0.5,  # a ratio of e^0.5 once exponentiated
    "predicted_speedup": 5.5,
    "goodput": 0.375,
    "goodput_ratio": 4.75,
}
PROMPTS = [f"p{i}" for i in range(6)]
TOKENS = 33


def _sentinel(name: str) -> Callable[..., Any]:
    def patched(first: Any, *rest: Any) -> Any:  # numbers or arrays, as the estimator takes
        return first * 0 + SENTINEL[name]

    return patched


def _spec(k: int, drafts: int, per_pos: list[int]) -> SpecCounters:
    return SpecCounters(num_drafts=drafts, num_draft_tokens=k * drafts, num_accepted_tokens=sum(per_pos),
                        accepted_per_pos=per_pos)


#: Each step's accepted drafts at K=3 and K=1: 12 and 20 steps committing the 32 tokens after the first.
STEPS_K3 = [3, 3, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0]
STEPS_K1 = [1] * 12 + [0] * 8


#: method → (cell, decode seconds per step, each step's accepted drafts); the baseline decodes one token per
#: step. EAGLE-3 at K=3 is the fastest of its K's.
def _offline_cells() -> dict[str, tuple[Cell, float, list[int] | None]]:
    return {
        "baseline": (cell("baseline"), 0.02, None),
        "eagle3-k1": (cell("eagle3-k1", "eagle3", 1, family="eagle3"), 0.022, STEPS_K1),
        "eagle3-k3": (cell("eagle3-k3", "eagle3", 3, family="eagle3"), 0.03, STEPS_K3),
        "dflash-k3": (cell("dflash-k3", "dflash", 3, family="dflash"), 0.025, STEPS_K3),
        "eagle3-dyn": (cell("eagle3-dyn", "eagle3", 3, schedule=[(1, 4, 3)]), 0.03, STEPS_K3),
    }


def _records(c: Cell, step_s: float, accepted: list[int] | None, *, rounds: bool = True) -> list[RequestRecord]:
    """One request per prompt: TTFT 0.1 s, then its steps of ``step_s`` each (a little slower each prompt), with
    its counters and step trace when it speculates."""
    k = c.k or 0
    steps = TOKENS - 1 if accepted is None else len(accepted)
    spec = trace = None
    if accepted is not None:
        spec = _spec(k, steps, [sum(a > i for a in accepted) for i in range(k)])
        trace = StepTrace(drafted=[k] * steps, accepted=accepted, complete=True, source="vllm")
    out = []
    for i, pid in enumerate(PROMPTS):
        decode = steps * step_s * (1 + i / 50)
        out.append(request(c, pid, tokens=TOKENS, ttft_s=0.1, latency_s=0.1 + decode,
                           itl_s=[decode / (TOKENS - 1)] * (TOKENS - 1), round=(i // 3) if rounds else None,
                           spec=spec, steps=trace))
    return out


def _world() -> tuple[list[Cell], list[Any], list[RequestRecord]]:
    """An offline target ``t`` (baseline, EAGLE-3 at K=1 and K=3, DFlash, a scheduled EAGLE-3; two speed rounds)
    and a server target ``s`` (baseline and EAGLE-3 at concurrency 2)."""
    cells, recs = [], []
    for c, step_s, accepted in _offline_cells().values():
        cells.append(c)
        recs += _records(c, step_s, accepted)
    for c, step_s, accepted in ((cell("baseline", target="s", batch_size=2), 0.02, None),
                                (cell("eagle3", k=3, target="s", batch_size=2), 0.03, STEPS_K3)):
        cells.append(c)
        recs += _records(c, step_s, accepted, rounds=False)
    cell_recs = [cell_record(c, wall_time_s=2.0, num_requests=len(PROMPTS), round_wall_s=[1.0, 1.0] if c.target == "t"
                             else None, counters=sum_counters(r.spec for r in recs if r.cell_id == c.cell_id))
                 for c in cells]
    return cells, cell_recs, recs


#: Every request of :func:`_world` meets it (TTFT 0.1 s, TPOT about 20 ms or less).
SLO_MS = {"ttft": 200.0, "tpot": 25.0}


def _ab_records() -> list[RequestRecord]:
    """An A/B run's baseline in three rounds, arm B a little slower."""
    out = []
    for arm, slow in (("a", 1.0), ("b", 1.1)):
        c = cell("baseline", target=f"t@{arm}")
        for rnd in range(3):
            for i, pid in enumerate(PROMPTS):
                decode = (TOKENS - 1) * 0.02 * slow * (1 + i / 50 + rnd / 100)
                out.append(request(c, pid, tokens=TOKENS, ttft_s=0.1, latency_s=0.1 + decode, round=rnd,
                                   repeat=rnd))
    return out


def _shown() -> dict[str, dict[str, float | None]]:
    """Per estimator, what each consumer shows of it."""
    from specbench import frames
    from specbench.analysis import ab_rounds, k_schedule, metrics, sequential
    from specbench.analysis.goodput import slo_seconds
    from specbench.analysis.goodput_vs_load import goodput_curves
    from specbench.analysis.method_comparison import headline_ratios, k_sweeps
    from specbench.analysis.pipeline import ok_cells_by_group, summarize_serving
    from specbench.config.suite import SLOSpec
    from specbench.regression.gate import GateRules, evaluate_gate
    from specbench.report.markdown import render_markdown
    from specbench.results.goodput_curve import GoodputSummary
    from specbench.results.noise_calibration import MetricNoise, NoiseCalibration
    from specbench.results.parts import SummaryExtra
    from specbench.results.summary import RunSummary

    cells, cell_recs, recs = _world()
    slo = slo_seconds(SLOSpec(**SLO_MS))
    groups = metrics.summarize_groups(cells, cell_recs, recs, slo=slo)
    unique, latest = metrics.unique_requests(recs), metrics.latest_cell_records(cell_recs)
    greqs = metrics.requests_by_group(cells, latest, unique)
    headline = headline_ratios(groups, greqs, {"t": "eagle3", "s": "eagle3"})
    curves = goodput_curves(groups, greqs, ok_cells_by_group(cells, latest), slo)
    summary = RunSummary(run_id="r", suite_name="s", groups=groups, headline=headline,
                         k_sweeps=k_sweeps(groups, greqs),
                         extra=SummaryExtra(serving=summarize_serving({"s"}, cells, unique, latest, {"s": "eagle3"},
                                                                      slo=slo),
                                            goodput=GoodputSummary(slo=SLOSpec(**SLO_MS), curves=curves)))
    by = {c.method: c for c in cells if c.target == "t"}
    g = summary.group(by["eagle3-k3"].group_id)
    assert g is not None and g.speedup is not None and g.output_tps is not None and g.tpot_s is not None
    assert g.step_time_s is not None and g.throughput_tps is not None

    base, meth = greqs[by["baseline"].group_id], greqs[by["eagle3-k3"].group_id]
    order = sorted(PROMPTS)
    speedup_units = sequential.ordered_units(sequential.prompt_units("speedup", meth, base), order)
    tpot_units = sequential.ordered_units(sequential.prompt_units("tpot", meth), order)
    ab = ab_rounds.paired_rounds(_ab_records())
    ab_a = ab_rounds.round_values([r for r in _ab_records() if r.cell_id.startswith("t@a") and r.round == 0], False)
    (row,) = [r for r in summary.headline if r.method == "dflash"]
    sweep = next(s for s in summary.k_sweeps if s.method == "eagle3")
    point = next(p for p in sweep.points if p.k == 3)
    schedule = k_schedule.schedules("r", "s", groups, greqs)
    (ms,) = [m for m in schedule.schedules if m.target == "t" and m.method == "eagle3"]
    (check,) = schedule.checks
    arm = next(a for a in check.arms if a.k == 3)
    speedups = {(r.target, r.metric): r for r in summary.extra.serving_speedups}
    (served,) = [r for r in summary.extra.serving_cells if r.method == "eagle3"]
    assert served.vs_baseline is not None
    frame = frames.groups_frame(summary).set_index("group_id").loc[g.group_id]
    (served_curve,) = [c for c in curves if c.target == "s"]  # one load, no rounds: the pooled ratio
    rounds_point = next(p for c in curves if c.target == "t" and c.method == "eagle3-k3" for p in c.points)
    gp_frame = frames.goodput_frame(summary).set_index("group_id").loc[served_curve.points[0].group_id]
    noise = NoiseCalibration(hardware_class="test", suite="s", runs=["a", "b"], metrics={
        m: MetricNoise(noise_floor_pct=1.0, pairs=1, changes=10, max_change_pct=1.0) for m in ("speedup", "output_tps", "goodput")})
    gate = {(c.group_id, c.metric): c.change.new.value for c in evaluate_gate(
        summary, summary, GateRules.model_validate({"rules": {"equivalence": None, "output_tps": {"max_drop_pct": 5},
                                                              "goodput": {"max_drop_pct": 5}}}), noise).checks
        if c.change is not None}
    report = render_markdown(summary)

    def in_report(text: str) -> float | None:
        return 1.0 if text in report else None

    return {
        "throughput_ratio": {
            "summary: paired speedup": g.speedup.value,
            "sequential: estimate": sequential.estimate("speedup", speedup_units),
            "sequential: confidence sequence": sequential.confidence_sequence("speedup", speedup_units).estimate,
            "serving: throughput speedup": speedups[("s", "throughput")].estimate.value,
            "serving: table tok/s ratio": served.vs_baseline.throughput_ratio,
            "headline: the method's speedup": row.method_speedup.value if row.method_speedup else None,
            "K sweep: speedup at K": point.speedup.value if point.speedup else None,
            "schedule: measured speedup of an arm": arm.speedup.value if arm.speedup else None,
            "frames: groups": float(frame["speedup"]),
            "gate: speedup": gate.get((g.group_id, "speedup")),
            "report: results table": in_report(f"{SENTINEL['throughput_ratio']:.2f}×"),
        },
        "token_rate": {
            "summary: output tok/s": g.output_tps.value,
            "summary: throughput": g.throughput_tps.value,
            "A/B rounds: output tok/s": ab_a.get("output_tps"),
            "serving: aggregate tok/s": served.output_throughput,
            "frames: groups": float(frame["output_tps"]),
            "gate: output tok/s": gate.get((g.group_id, "output_tps")),
            "report: results table": in_report(f"| {SENTINEL['token_rate']:.0f} ["),
        },
        "tpot": {
            "summary: TPOT": g.tpot_s.value,
            "sequential: estimate": sequential.estimate("tpot", tpot_units),
            "A/B rounds: TPOT": ab_a.get("tpot_s"),
            "serving: a request's TPOT": served.tpot.p50,
            "K sweep: TPOT at K": point.tpot_s.value if point.tpot_s else None,
            "schedule: measured TPOT of an arm": arm.tpot_s.value if arm.tpot_s else None,
            "schedule: predicted TPOT of an arm": arm.predicted_tpot_s,
            "report: K sweep": in_report(f"| {SENTINEL['tpot'] * 1000:.2f} ["),
        },
        "tpot_ratio": {
            "serving: TPOT speedup": speedups[("s", "tpot")].estimate.value,
            "serving: table TPOT speedup": served.vs_baseline.tpot_ratio,
            "report: serving table": in_report(f"{SENTINEL['tpot_ratio']:.2f}× / "),
        },
        "step_time": {
            "summary: time per step": g.step_time_s.value,
            "A/B rounds: time per step": ab_a.get("step_time_s"),
            "K sweep: time per step at K": point.step_time_s.value if point.step_time_s else None,
            "report: K sweep": in_report(f"| {SENTINEL['step_time'] * 1000:.2f} ["),
        },
        "round_log_ratio": {
            "A/B rounds: log B/A": ab["tpot_s"][next(iter(ab["tpot_s"]))][0],
            "headline: speedup ratio (log)": math.log(row.speedup_ratio.value or 1.0),
            "report: headline": (math.log(float(f"{math.exp(-SENTINEL['round_log_ratio']):.2f}"))
                                 if f"{math.exp(-SENTINEL['round_log_ratio']):.2f}×" in report else None),
            "goodput: ratio with rounds (log)": math.log(rounds_point.ratio.value or 1.0),
        },
        "goodput": {
            "summary: goodput": g.goodput.value if g.goodput else None,
            "serving: a cell's goodput": served.goodput,
            "frames: groups": None if frame["goodput"] is None else float(frame["goodput"]),
            "gate: goodput": gate.get((g.group_id, "goodput")),
            "report: goodput table": in_report(f"| {SENTINEL['goodput']:.3f} ["),
        },
        "goodput_ratio": {
            "goodput: ratio to no speculation": served_curve.points[0].ratio.value,
            "frames: goodput": None if gp_frame["ratio"] is None else float(gp_frame["ratio"]),  # none: no good baseline
            "report: goodput table": in_report(f"| {SENTINEL['goodput_ratio']:.2f}× ["),
        },
        "predicted_speedup": {
            "K model: predicted speedup at K=3": next(c.speedup.value for c in ms.grid if c.k == 3),
            "schedule: predicted speedup of an arm": arm.predicted_speedup.value if arm.predicted_speedup else None,
        },
    }


#: What a consumer shows when the sentinel reached it, where that is not the sentinel itself.
EXPECTED = {
    ("report: results table", "throughput_ratio"): 1.0, ("report: results table", "token_rate"): 1.0,
    ("report: K sweep", "tpot"): 1.0, ("report: K sweep", "step_time"): 1.0,
    ("report: serving table", "tpot_ratio"): 1.0,
    # the headline's rounds are decided on TPOT's log ratio; the row shows the decode speed ratio, its reciprocal
    ("headline: speedup ratio (log)", "round_log_ratio"): -0.5,
    ("report: headline", "round_log_ratio"): math.log(0.61),  # e^-0.5, as the table rounds it
    ("report: goodput table", "goodput"): 1.0, ("report: goodput table", "goodput_ratio"): 1.0,
}


@pytest.mark.parametrize("name", sorted(SENTINEL))
def test_the_one_function_of_each_speed_estimator_reaches_every_place_it_is_shown(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def shown_sentinel(where: str, v: float | None) -> bool:
        return v is not None and v == pytest.approx(EXPECTED.get((where, name), SENTINEL[name]))

    real = _shown()[name]
    assert all(v is not None and math.isfinite(v) for k, v in real.items() if not k.startswith("report")), real
    assert not any(shown_sentinel(k, v) for k, v in real.items()), real  # a real value is no sentinel
    monkeypatch.setattr(speed_estimators, name, _sentinel(name))
    patched = _shown()[name]
    missed = {k: v for k, v in patched.items() if not shown_sentinel(k, v)}
    assert missed == {}, f"{name} does not reach: {missed}"


def test_the_best_k_and_the_step_time_slope_come_from_the_estimators(monkeypatch: pytest.MonkeyPatch) -> None:
    """Derived from an estimator: the best K (the argmax of token rates) and the slope of step time over K."""
    from specbench.analysis import metrics
    from specbench.analysis.method_comparison import k_sweeps

    def sweep() -> tuple[float | None, float | None]:
        cells, cell_recs, recs = _world()
        groups = metrics.summarize_groups(cells, cell_recs, recs)
        greqs = metrics.requests_by_group(cells, metrics.latest_cell_records(cell_recs), metrics.unique_requests(recs))
        s = next(s for s in k_sweeps(groups, greqs) if s.method == "eagle3")
        return s.best_k.value, s.step_time_slope_s.value

    best, slope = sweep()
    assert best == 3 and slope is not None and slope > 0.001
    monkeypatch.setattr(speed_estimators, "token_rate", _sentinel("token_rate"))
    assert sweep()[0] == 1  # every K as fast: the first
    monkeypatch.setattr(speed_estimators, "step_time", _sentinel("step_time"))
    assert sweep()[1] == pytest.approx(0.0, abs=1e-12)  # the same step time at every K: no slope
