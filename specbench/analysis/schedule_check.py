"""A dynamic-speculation schedule on the engine, against the same drafter at each fixed K (pure; issue 37).

For every group the run measured with a schedule that drafts (``schedule:`` with some K > 0), at its
load: the fixed-K groups of the same method kind at the same load (K = 0: the drafter loaded, a
schedule of zeros), their measured tokens per step, TPOT and speedup over the baseline (no drafter),
the speedups the step-time model predicts (:mod:`specbench.analysis.k_schedule`), the best fixed K
and whether the schedule's speedup lies inside its interval.

Whether the engine honoured the schedule: vLLM's per-request metrics list each drafting step's
draft tokens (a step the schedule gives K = 0 drafts nothing and is counted from the tokens left
over, :func:`specbench.analysis.step_accounting.request_steps`). The share of steps at each K is set beside
what the schedule gives each step's batch size, the requests in the engine at that step
(:func:`specbench.analysis.step_time_model.running_per_step`: exact offline, estimated from send and
finish times on a server, where requests still prefilling count as vLLM counts them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from specbench.analysis import step_time_model
from specbench.analysis.k_prediction import analysable
from specbench.analysis.step_accounting import request_steps
from specbench.config.dynamic_sd import drafts_nothing, expand_schedule
from specbench.results.records import RequestRecord
from specbench.results.schedule_file import KPrediction, LoadArm, MethodSchedule, ScheduleLoadCheck
from specbench.results.summary import GroupSummary
from specbench.stats import Estimate


def _load(g: GroupSummary) -> tuple:
    return (g.target, g.dataset, g.temperature, g.batch_size, g.request_rate)


ONE = Estimate(value=1.0, ci_low=1.0, ci_high=1.0, method="exact")


def _arm(label: str, k: int | None, g: GroupSummary, at_k: int | None, n: int | None, ms: MethodSchedule | None,
         pred: KPrediction | None) -> LoadArm:
    """One way of running at this load: measured (``g``) and predicted at ``at_k`` and batch size ``n``."""
    cell = None
    if ms is not None and n is not None and at_k is not None:
        at = min(n, max((c.batch_size for c in ms.grid), default=n))  # past the model's batch sizes: its largest
        cell = next((c for c in ms.grid if c.k == at_k and c.batch_size == at), None)
    tps = ONE if at_k == 0 else next((p.tokens_per_step for p in pred.points if p.k == at_k), None) if pred else None
    return LoadArm(label=label, k=k, group_id=g.group_id, tokens_per_step=g.tokens_per_step, tpot_s=g.tpot_s,
                   speedup=g.speedup, predicted_speedup=cell.speedup if cell else None,
                   predicted_tokens_per_step=tps, predicted_step_time_s=cell.step_time_s if cell else None)


def fewest_steps(r: RequestRecord) -> int | None:
    """A request's decoding steps, the fewest its trace allows: under a schedule vLLM lists only the
    drafting steps, and whether the last one overcounted is then open (one step either way)."""
    s = request_steps(r.num_output_tokens, r.steps) if r.steps is not None else None
    return s.steps[0] if s is not None and s.steps[0] > 0 else None


Known = Sequence[tuple[RequestRecord, float, int, np.ndarray]]


def k_shares(schedule: Sequence[Sequence[int]], known: Known, k_max: int) -> tuple[
        dict[int, float], dict[int, float], float | None, float | None]:
    """(measured share of steps at each K, expected share, measured and expected draft tokens per step)
    of a scheduled group's requests with their steps' batch sizes (:func:`step_time_model.running_per_step`)."""
    seen: Counter[int] = Counter()
    want: Counter[int] = Counter()
    drafted = expected = 0.0
    steps_total = 0
    if not known:
        return {}, {}, None, None
    dense = expand_schedule(schedule, max(int(max(n.max() for *_, n in known)), 1), k_max)
    for r, _, s, n in known:
        trace = r.steps
        if trace is None:
            continue
        drafting = [d for d in trace.drafted if d > 0]
        seen.update(drafting)
        if s > len(drafting):
            seen[0] += s - len(drafting)
        drafted += sum(drafting)
        ks = np.array([dense[min(int(x), len(dense) - 1)] for x in n])
        want.update(ks.tolist())
        expected += float(ks.sum())
        steps_total += s
    if steps_total == 0:
        return {}, {}, None, None
    total_seen, total_want = sum(seen.values()) or 1, sum(want.values()) or 1
    return ({k: v / total_seen for k, v in sorted(seen.items())}, {k: v / total_want for k, v in sorted(want.items())},
            drafted / steps_total, expected / steps_total)


def _model_batch_size(g: GroupSummary, known: Known) -> int | None:
    """The load's batch size for the model: its concurrency, or for a rate load its mean requests per step."""
    if g.request_rate is None:
        return g.batch_size
    n = [x for *_, arr in known for x in arr.tolist()]
    return max(1, round(float(np.mean(n)))) if n else None


def check_schedules(groups: Sequence[GroupSummary], schedules: Sequence[MethodSchedule],
                    group_requests: Mapping[str, Sequence[RequestRecord]],
                    predictions: Sequence[KPrediction] = ()) -> list[ScheduleLoadCheck]:
    """One :class:`ScheduleLoadCheck` per scheduled group that drafts (see the module docstring);
    ``predictions``: the run's τ(K) predictions, whose tokens per step(K) at the load the arms show."""
    ok = [g for g in groups if analysable(g)]
    out: list[ScheduleLoadCheck] = []
    for g in ok:
        if g.schedule is None or drafts_nothing(g.schedule):
            continue
        same = [h for h in ok if _load(h) == _load(g) and h.method_kind == g.method_kind and h is not g]
        fixed = {h.k: h for h in same if h.schedule is None and h.k}
        off = [h for h in same if drafts_nothing(h.schedule)]
        families = {h.family or h.method for h in fixed.values()}
        family = families.pop() if len(families) == 1 else None
        ms = next((s for s in schedules if family is not None and (s.target, s.method, s.dataset, s.temperature)
                   == (g.target, family, g.dataset, g.temperature)), None)
        known = step_time_model.running_per_step(group_requests.get(g.group_id, []), g.batch_size, True,
                                            steps_of=fewest_steps)
        n_model = _model_batch_size(g, known)
        pred = next((p for p in predictions if family is not None and (
            p.target, p.method, p.dataset, p.temperature, p.batch_size, p.request_rate) == (
            g.target, family, g.dataset, g.temperature, g.batch_size, g.request_rate)), None)
        arms = [_arm("K=0 (drafter, no drafts)", 0, off[0], 0, n_model, ms, pred)] if len(off) == 1 else []
        arms += [_arm(f"K={k}", k, fixed[k], k, n_model, ms, pred) for k in sorted(fixed)]
        k_max = g.k or 0
        sched_k = expand_schedule(g.schedule, max(n_model or 1, 1), k_max)[n_model] if n_model else None
        arms.append(_arm("schedule", None, g, sched_k, n_model, ms, pred))
        measured = [(a.speedup, a) for a in arms if a.k is not None and a.speedup is not None
                    and a.speedup.value is not None]
        top = max(measured, key=lambda m: m[0].value or 0.0) if measured else None
        best = top[1] if top else None
        within = None
        if top is not None and g.speedup is not None and g.speedup.value is not None:
            lo, hi = top[0].ci_low, top[0].ci_high
            within = lo is not None and hi is not None and lo <= g.speedup.value <= hi
        share, share_want, drafted, drafted_want = k_shares(g.schedule, known, k_max)
        out.append(ScheduleLoadCheck(
            target=g.target, method=g.method, family=family, dataset=g.dataset, temperature=g.temperature,
            batch_size=g.batch_size, request_rate=g.request_rate, schedule=list(g.schedule),
            model_batch_size=n_model, arms=arms, best_fixed_k=best.k if best else None, within_best=within,
            drafted_per_step=drafted, drafted_per_step_expected=drafted_want, k_share=share,
            k_share_expected=share_want))
    return out
