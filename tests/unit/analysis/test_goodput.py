"""Goodput under SLOs (issue 52), on hand-built records: the group's goodput is vLLM's ``request_goodput``
recomputed by hand to the request, the ratio to no speculation is decided by the headline's rule with speed
rounds and bootstrapped over prompts without, and the curve says where speculation stops raising goodput."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from support.factories import cell, cell_record, request

from specbench import frames
from specbench.analysis import metrics
from specbench.analysis.apply_noise import with_speed_noise
from specbench.analysis.goodput import slo_seconds
from specbench.analysis.goodput_vs_load import EMPTY_ROUND, NO_ROUND_WALLS, goodput_curves, stops_raising
from specbench.analysis.pipeline import ok_cells_by_group, summarize_run
from specbench.config.plan import Cell
from specbench.config.suite import SLOSpec
from specbench.report.compact import render_compact
from specbench.report.markdown import render_markdown
from specbench.results.goodput_curve import GoodputPoint
from specbench.results.manifest import RunManifest
from specbench.results.noise_calibration import MetricNoise, NoiseCalibration
from specbench.results.records import CellRecord, RequestRecord
from specbench.stats import Estimate

SLO_MS = {"ttft": 200.0, "tpot": 20.0, "e2el": 1500.0}
SLO = slo_seconds(SLOSpec(**SLO_MS))


def vllm_good(records: list[RequestRecord]) -> int:
    """``calculate_metrics`` of vLLM's benchmarks/serve.py, written again: successful requests only; TPOT =
    (latency − TTFT) / (output tokens − 1), 0 for a one-token output; good when every value ≤ its SLO."""
    good = 0
    for r in records:
        if r.error is not None:
            continue
        out = len(r.output_token_ids)
        tpot = (r.latency_s - r.ttft_s) / (out - 1) if out > 1 else 0.0  # type: ignore[operator]
        values = {"ttft": r.ttft_s, "tpot": tpot, "e2el": r.latency_s}
        if all(SLO_MS[k] / 1000 >= values[k] for k in SLO_MS):  # type: ignore[operator]
            good += 1
    return good


def _records(c: Cell, tpot_s: float, n: int, rng: random.Random, *, rounds: int = 1) -> list[RequestRecord]:
    """``n`` requests per round: TTFT around 0.1 s, 64 tokens at about ``tpot_s`` each (some fail, one is a
    one-token answer, one sits exactly on the TPOT limit)."""
    out = []
    for rnd in range(rounds):
        for i in range(n):
            ttft = rng.uniform(0.05, 0.25)
            tokens = 1 if i == 3 else 64
            tpot = 0.020 if i == 5 else tpot_s * rng.uniform(0.6, 1.6)
            fields = {"error": "timeout: read"} if i == 7 else {}
            out.append(request(c, f"p{rnd}-{i}", tokens=tokens, ttft_s=ttft, latency_s=ttft + tpot * (tokens - 1),
                               round=rnd if rounds > 1 else None, repeat=0, **fields))
    return out


def _world(loads: dict[int, tuple[float, float]], *, rounds: int = 1, round_walls: bool = True, n: int = 12,
           seed: int = 0) -> tuple[list[Cell], list[CellRecord], list[RequestRecord]]:
    """A server target at each load: the baseline and EAGLE-3 with the given typical TPOTs; each cell's wall is
    its requests' latencies over the load (as streams in flight), per round when there are rounds."""
    rng = random.Random(seed)
    cells, crs, recs = [], [], []
    for load, tpots in loads.items():
        for method, tpot in zip(("baseline", "eagle3"), tpots, strict=True):
            c = cell(method, k=None if method == "baseline" else 3, batch_size=load)
            mine = _records(c, tpot, n, rng, rounds=rounds)
            walls = [sum(r.latency_s or 0 for r in mine if r.round == (rnd if rounds > 1 else None)) / load
                     for rnd in range(rounds)]
            cells.append(c)
            recs += mine
            crs.append(cell_record(c, wall_time_s=sum(walls), num_requests=len(mine),
                                   round_wall_s=walls if rounds > 1 and round_walls else None))
    return cells, crs, recs


def _analysed(cells: list[Cell], crs: list[CellRecord], recs: list[RequestRecord]):
    groups = metrics.summarize_groups(cells, crs, recs, slo=SLO)
    latest = metrics.latest_cell_records(crs)
    greqs = metrics.requests_by_group(cells, latest, metrics.unique_requests(recs))
    return groups, greqs, goodput_curves(groups, greqs, ok_cells_by_group(cells, latest), SLO)


def test_a_groups_goodput_is_vllms_request_goodput_recomputed_by_hand() -> None:
    cells, crs, recs = _world({4: (0.016, 0.012)}, rounds=2, n=20)
    groups, greqs, _ = _analysed(cells, crs, recs)
    for g in groups:
        mine = greqs[g.group_id]
        wall = sum(c.wall_time_s or 0 for c in crs if c.cell_id.startswith(g.group_id + "/"))
        good = vllm_good(mine)
        assert 0 < good < len(mine)  # the SLOs split the requests
        assert g.goodput is not None and g.goodput_share is not None
        assert round(g.goodput.value * wall) == good and g.goodput.value == pytest.approx(good / wall)  # type: ignore[operator]
        assert g.goodput.n == g.goodput_share.n == len(mine) == 40  # requests sent, the failed ones included
        assert g.goodput_share.value == pytest.approx(good / len(mine)) and g.goodput_share.method == "wilson"
        share_lo, share_hi = g.goodput_share.ci_low, g.goodput_share.ci_high
        assert g.goodput.ci_low == pytest.approx(share_lo * len(mine) / wall)  # type: ignore[operator]
        assert g.goodput.ci_high == pytest.approx(share_hi * len(mine) / wall)  # type: ignore[operator]


def test_with_rounds_the_ratio_is_decided_by_the_headlines_rule() -> None:
    cells, crs, recs = _world({1: (0.022, 0.012)}, rounds=4, n=16)
    groups, greqs, curves = _analysed(cells, crs, recs)
    (curve,) = curves
    (point,) = curve.points
    assert point.rounds == 4 and point.ratio.method == "confidence sequence" and point.note is None
    def rate(gid: str, rnd: int) -> float:
        walls = next(c.round_wall_s for c in crs if c.cell_id.startswith(gid + "/"))
        return vllm_good([r for r in greqs[gid] if r.round == rnd]) / walls[rnd]  # type: ignore[index]

    per_round = [math.log(rate(point.group_id, rnd) / rate(point.baseline_group, rnd)) for rnd in range(4)]
    assert point.ratio.value == pytest.approx(math.exp(float(np.mean(per_round))))  # the geometric mean
    assert point.verdict == "higher" and point.ratio.ci_low > 1.05  # type: ignore[operator]
    assert curve.raises_up_to == 1 and curve.stops_at is None


def test_without_rounds_the_pooled_ratio_is_bootstrapped_over_prompts() -> None:
    cells, crs, recs = _world({1: (0.030, 0.012), 8: (0.014, 0.026)}, n=40)
    groups, greqs, curves = _analysed(cells, crs, recs)
    (curve,) = curves
    assert [p.load for p in curve.points] == [1.0, 8.0]
    for p in curve.points:
        m, b = (next(g for g in groups if g.group_id == gid) for gid in (p.group_id, p.baseline_group))
        assert p.ratio.value == pytest.approx(m.goodput.value / b.goodput.value)  # type: ignore[union-attr,operator]
        assert p.rounds is None and p.ratio.method == "bootstrap" and p.ratio.n == 40  # prompts
    assert [p.verdict for p in curve.points] == ["higher", "lower"]
    assert (curve.raises_up_to, curve.stops_at) == (1.0, 8.0)


def test_rounds_that_cannot_decide_fall_back_to_the_pooled_interval_and_say_why() -> None:
    cells, crs, recs = _world({2: (0.016, 0.012)}, rounds=3, round_walls=False)
    (point,) = _analysed(cells, crs, recs)[2][0].points
    assert point.rounds is None and point.note == NO_ROUND_WALLS and point.ratio.method == "round bootstrap"
    assert point.ratio.rounds == 3  # the pooled ratio's interval still resamples the rounds
    cells, crs, recs = _world({2: (0.016, 0.012)}, rounds=3)
    (point,) = _analysed(cells, crs, recs)[2][0].points
    assert point.rounds == 3 and point.note is None
    failed = [r.model_copy(update={"error": "http: 503"}) if r.round == 1 and "baseline" in r.cell_id else r
              for r in recs]  # no baseline request of round 1 meets the SLOs: that round has no ratio
    (point,) = _analysed(cells, crs, failed)[2][0].points
    assert point.rounds is None and point.note == EMPTY_ROUND and point.ratio.method == "round bootstrap"


def test_where_speculation_stops_raising_goodput() -> None:
    def pts(*verdicts: str) -> list[GoodputPoint]:
        return [GoodputPoint(batch_size=2 ** i, group_id=f"m{i}", baseline_group=f"b{i}", ratio=Estimate(value=1.0),
                             verdict=v) for i, v in enumerate(verdicts)]  # type: ignore[arg-type]

    assert stops_raising(pts("higher", "higher", "undecided", "lower")) == (2.0, 4.0)
    assert stops_raising(pts("higher", "lower", "higher", "same")) == (4.0, 8.0)  # the last load it raises it
    assert stops_raising(pts("lower", "same")) == (None, 1.0)  # nowhere: from the lowest load
    assert stops_raising(pts("same", "higher")) == (2.0, None)  # still at the highest load measured


def test_no_goodput_without_the_timings_or_with_a_resumed_cell() -> None:
    cells, crs, recs = _world({1: (0.016, 0.012)})
    untimed = [r.model_copy(update={"ttft_s": None}) if r.prompt_id == "p0-0" else r for r in recs]
    assert all(g.goodput is None for g in metrics.summarize_groups(cells, crs, untimed, slo=SLO))
    resumed = [c.model_copy(update={"reason": "resumed: 4 requests from an earlier attempt"}) for c in crs]
    assert all(g.goodput is None for g in metrics.summarize_groups(cells, resumed, recs, slo=SLO))
    assert all(g.goodput is None for g in metrics.summarize_groups(cells, crs, recs))  # no SLO


def _summary():
    cells, crs, recs = _world({1: (0.030, 0.012), 8: (0.014, 0.026)}, n=40)
    manifest = RunManifest.load({"run_id": "r", "suite_name": "s", "suite": {
        "name": "s", "targets": [{"name": "t", "model": "m", "engine": "vllm-server", "methods": [{"method": "baseline"}]}],
        "datasets": [{"name": "d", "kind": "humaneval"}], "slo": SLO_MS}})
    return cells, summarize_run(manifest, cells, crs, recs)


def test_a_calibrations_goodput_noise_widens_the_ratios_and_decides_again() -> None:
    _, summary = _summary()
    cal = NoiseCalibration(hardware_class="h", suite="s", runs=["a", "b"], metrics={
        "goodput": MetricNoise(noise_floor_pct=80.0, pairs=1, changes=4, max_change_pct=90.0)})
    (before,) = summary.extra.goodput.curves  # type: ignore[union-attr]
    (after,) = with_speed_noise(summary, cal).extra.goodput.curves  # type: ignore[union-attr]
    assert [p.verdict for p in before.points] == ["higher", "lower"] and before.stops_at == 8.0
    assert [p.verdict for p in after.points] == ["not distinguishable", "lower"]  # drift could explain load 1
    assert (after.raises_up_to, after.stops_at) == (None, 1.0)
    assert after.points[0].ratio.method == "bootstrap + between-run (A/A)"


def test_the_run_summary_report_compact_summary_and_frames_show_it() -> None:
    cells, summary = _summary()
    gp = summary.extra.goodput
    assert gp is not None and gp.slo.given() == SLO_MS and len(gp.curves) == 1
    served = {r.cell_id: r for r in summary.extra.serving_cells}
    for c in cells:  # the serving table's cell goodput is the group's (one cell each)
        g = summary.group(c.group_id)
        assert g is not None and g.goodput is not None and served[c.cell_id].goodput == pytest.approx(g.goodput.value)
    report = render_markdown(summary)
    assert "## Goodput under SLOs" in report and "TTFT ≤ 200 ms, TPOT ≤ 20 ms, end-to-end latency ≤ 1500 ms" in report
    assert "| t | d | 0 | eagle3 | concurrency | 1: higher · 8: lower | 1 | 8 |" in report
    assert "Stops raising it at" in render_compact(summary)
    frame = frames.goodput_frame(summary)
    assert list(frame["verdict"]) == ["higher", "lower"] and list(frame["stops_at"]) == [8.0, 8.0]
    groups = frames.groups_frame(summary).set_index("group_id")
    assert groups.loc[cells[1].group_id, "goodput"] == pytest.approx(summary.groups[1].goodput.value)  # type: ignore[union-attr]
