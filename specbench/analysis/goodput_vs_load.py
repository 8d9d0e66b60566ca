"""Goodput against no speculation at every load, and the load where speculation stops raising it (pure;
issue 52; a group's own goodput: :mod:`specbench.analysis.goodput`).

Per method (each K of a sweep its own), target, dataset, temperature and load axis (concurrency or Poisson
request rate), each load where the method's group and the baseline's (the same target, dataset, temperature,
load and input-length slice) have a goodput gets a point:

* **with speed rounds** (both arms measured in the same ≥ 2 rounds, their cells holding each round's wall time,
  and in every round some request of each arm met the SLOs): per round the log ratio of the two goodputs
  (:func:`~specbench.results.speed_estimators.round_log_ratio` of
  :func:`~specbench.results.speed_estimators.goodput` over that round's requests and wall), decided by the
  headline's rule (:data:`~specbench.analysis.method_comparison.HEADLINE_RULE`, ``specbench ab``'s confidence
  sequence with a ±5 % margin): the ratio is the geometric mean of the per-round ratios, the verdict
  ``higher`` / ``lower`` / ``same`` / ``undecided``;
* **otherwise** the pooled ratio goodput(method) / goodput(baseline)
  (:func:`~specbench.results.speed_estimators.goodput_ratio`) with a 95 % bootstrap over prompts (a prompt's
  requests in both arms move together; the walls held fixed; with rounds, over rounds and then prompts),
  ``higher`` / ``lower`` when the interval lies above / below 1, else ``not distinguishable``; a run with rounds
  that could not be decided by them says why.

Where speculation stops raising goodput (:func:`stops_raising`): the lowest load from which on no measured
load's verdict is ``higher``; the curve also keeps the highest load where it is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from specbench import stats
from specbench.analysis.ab_decision import decide
from specbench.analysis.method_comparison import HEADLINE_RULE, speedup_ratio_verdict
from specbench.analysis.serving_metrics import SLO, meets_slo
from specbench.results import speed_estimators
from specbench.results.goodput_curve import GoodputCurve, GoodputPoint, GoodputVerdict, LoadAxis
from specbench.results.records import CellRecord, RequestRecord
from specbench.results.summary import GroupSummary
from specbench.stats import Estimate, with_between_run

#: The headline's verdict words (a speed ratio) as a goodput ratio's.
VERDICT: dict[str, GoodputVerdict] = {"faster": "higher", "slower": "lower", "same": "same", "undecided": "undecided",
                                      "not distinguishable": "not distinguishable", "no data": "no data"}
#: Why a point of a run with speed rounds was decided on the pooled interval instead (its ``note``).
NO_ROUND_WALLS = "its cells hold no per-round wall times, recorded before they were kept"
EMPTY_ROUND = "in a round no request of one arm met the SLOs, so that round has no ratio"


def _good_by_round(records: Sequence[RequestRecord], slo: SLO) -> dict[int, int]:
    out: dict[int, int] = defaultdict(int)
    for r in records:
        if r.round is not None:
            out[r.round] += int(meets_slo(r, slo))
    return out


def _walls_by_round(cells: Sequence[CellRecord]) -> dict[int, float] | None:
    """Σ over a group's cells of each round's wall; None when a cell did not keep them."""
    out: dict[int, float] = defaultdict(float)
    for c in cells:
        if c.round_wall_s is None:
            return None
        for i, w in enumerate(c.round_wall_s):
            out[i] += w
    return out


def goodput_round_log_ratios(method: Sequence[RequestRecord], m_cells: Sequence[CellRecord], baseline: Sequence[RequestRecord],
                     b_cells: Sequence[CellRecord], slo: SLO) -> tuple[np.ndarray | None, str | None]:
    """Per round both arms ran (in round order), log(goodput of the method / the baseline's); ``(None, why)`` when
    the rounds cannot decide (``why`` None: there are no rounds)."""
    gm, gb = _good_by_round(method, slo), _good_by_round(baseline, slo)
    common = sorted(set(gm) & set(gb))
    if len(common) < 2:
        return None, None
    wm, wb = _walls_by_round(m_cells), _walls_by_round(b_cells)
    if wm is None or wb is None:
        return None, NO_ROUND_WALLS
    if any(gm[r] == 0 or gb[r] == 0 or wm.get(r, 0.0) <= 0 or wb.get(r, 0.0) <= 0 for r in common):
        return None, EMPTY_ROUND
    rates_m = np.array([speed_estimators.goodput(gm[r], wm[r]) for r in common], float)
    rates_b = np.array([speed_estimators.goodput(gb[r], wb[r]) for r in common], float)
    return np.asarray(speed_estimators.round_log_ratio(rates_m, rates_b), float), None


def pooled_ratio(method: Sequence[RequestRecord], wall_m: float, baseline: Sequence[RequestRecord], wall_b: float,
                 slo: SLO) -> Estimate:
    """goodput(method) / goodput(baseline) over every request of each arm, bootstrapped over prompts (a prompt's
    requests in both arms move together; each arm's wall held fixed; in a run with speed rounds the round bootstrap,
    :func:`specbench.stats.by_rounds`); no value when no baseline request met it."""
    rows: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    round_of: dict[str, int | None] = {}
    for col, recs in ((0, method), (1, baseline)):
        for r in recs:
            rows[r.prompt_id][col] += float(meets_slo(r, slo))
            round_of.setdefault(r.prompt_id, r.round)
    prompts = sorted(rows)
    arr = np.array([rows[p] for p in prompts], float).reshape(-1, 2)

    def ratio(a: np.ndarray) -> float:
        s = a.sum(axis=0)
        return float(speed_estimators.goodput_ratio(s[0], wall_m, s[1], wall_b)) if s[1] > 0 else float("nan")

    def ratios(blk: np.ndarray) -> np.ndarray:  # each resample of a block (b, n, 2)
        s = blk.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = speed_estimators.goodput_ratio(s[:, 0], wall_m, s[:, 1], wall_b)
        return np.where(s[:, 1] > 0, out, np.nan)

    if arr.size == 0 or not np.isfinite(ratio(arr)):
        return Estimate(value=None, n=int(arr.shape[0]))
    return stats.by_rounds(arr, ratio, [round_of[p] for p in prompts], batched=ratios)


def goodput_point(g: GroupSummary, base: GroupSummary, records: Mapping[str, Sequence[RequestRecord]],
                  cells: Mapping[str, Sequence[CellRecord]], slo: SLO) -> GoodputPoint:
    """The method group ``g`` against its baseline group ``base`` at their load (see the module)."""
    m, b = records.get(g.group_id, []), records.get(base.group_id, [])
    mc, bc = cells.get(g.group_id, []), cells.get(base.group_id, [])
    lr, note = goodput_round_log_ratios(m, mc, b, bc, slo)
    rounds = to_decide = None
    if lr is not None:
        decision = decide(lr, "goodput", HEADLINE_RULE)
        ratio, rounds, to_decide = decision.ratio, decision.rounds, decision.rounds_to_decide
    else:
        ratio = pooled_ratio(m, sum(c.wall_time_s or 0.0 for c in mc), b, sum(c.wall_time_s or 0.0 for c in bc), slo)
    return GoodputPoint(batch_size=g.batch_size, request_rate=g.request_rate, group_id=g.group_id,
                        baseline_group=base.group_id, ratio=ratio, verdict=VERDICT[speedup_ratio_verdict(ratio, rounds)],
                        rounds=rounds, rounds_to_decide=to_decide, note=note)


def stops_raising(points: Sequence[GoodputPoint]) -> tuple[float | None, float | None]:
    """``(raises_up_to, stops_at)`` of a curve's points: the highest load whose verdict is ``higher``, and the lowest
    load from which on none is (None: the highest load measured is ``higher``)."""
    pts = sorted(points, key=lambda p: p.load)
    higher = [p.load for p in pts if p.verdict == "higher"]
    top = max(higher) if higher else None
    after = [p.load for p in pts if top is None or p.load > top]
    return top, (after[0] if after else None)


def goodput_curves(groups: Sequence[GroupSummary], records: Mapping[str, Sequence[RequestRecord]],
                   cells: Mapping[str, Sequence[CellRecord]], slo: SLO) -> list[GoodputCurve]:
    """One curve per (target, dataset, temperature, slice, load axis, method) with a point at each load where the
    method and the baseline have a goodput (``records``: group id → its requests; ``cells``: group id → its ok
    cells' records)."""
    baselines = {g.baseline_key: g for g in groups if g.method_kind == "baseline" and g.goodput is not None}
    curves: dict[tuple, list[tuple[GroupSummary, GroupSummary]]] = defaultdict(list)
    for g in groups:
        base = baselines.get(g.baseline_key)
        if g.method_kind == "baseline" or g.goodput is None or g.lossy is not None or base is None:
            continue
        axis: LoadAxis = "concurrency" if g.request_rate is None else "request_rate"
        curves[(g.target, g.dataset, g.temperature, g.slice.id if g.slice else None, axis, g.method)].append((g, base))
    out = []
    for (target, dataset, temp, slice_id, axis, method), pairs in curves.items():
        points = sorted((goodput_point(g, base, records, cells, slo) for g, base in pairs), key=lambda p: p.load)
        top, stop = stops_raising(points)
        g0 = pairs[0][0]
        out.append(GoodputCurve(target=target, dataset=dataset, temperature=temp, slice_id=slice_id, method=method,
                                method_kind=g0.method_kind, k=g0.k, axis=axis, points=points, raises_up_to=top,
                                stops_at=stop))
    return out


def with_between_run_noise(curve: GoodputCurve, pct: float | None) -> GoodputCurve:
    """``curve`` with each ratio's interval widened by an A/A calibration's between-run noise of goodput (``pct``,
    :func:`specbench.stats.with_between_run`; a goodput ratio has no calibrated floor of its own, so a goodput's
    is used) and its verdicts and stopping load decided again on the widened intervals."""
    if not pct:
        return curve
    points = []
    for p in curve.points:
        ratio = with_between_run(p.ratio, pct)
        points.append(p.model_copy(update={"ratio": ratio, "verdict": VERDICT[speedup_ratio_verdict(ratio, p.rounds)]}))
    top, stop = stops_raising(points)
    return curve.model_copy(update={"points": points, "raises_up_to": top, "stops_at": stop})
