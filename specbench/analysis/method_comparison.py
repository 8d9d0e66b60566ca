"""Methods against each other (pure): the headline table and the K sweeps.

The headline compares every method of a target with the target's reference
method (``compare_to``; default its EAGLE-3) at each dataset, temperature
and load, each arm at its best K there:

* ``speedup_ratio`` = (Σ tokens / Σ latency of the method) / (the same of the
  reference) (:func:`specbench.results.speed_estimators.throughput_ratio`), over the requests both arms
  measured (same prompt, sample, repeat): in a run of one round the pooled ratio bootstrapped over those prompts
  (:func:`metrics.paired_speedup` with the reference in the baseline's place), in
  a run with speed rounds per round and decided by the A/B rule (below);
* ``tau_ratio`` = pooled τ of the method / pooled τ of the reference over the
  same shared prompts, from the per-request counters, bootstrapped over prompts;
* in a run with speed rounds (the method against the reference inside one run is an A/B, issue 36) the
  speed ratio is decided by ``specbench ab``'s rule (:data:`HEADLINE_RULE`): per round, the paired log
  ratio of pooled TPOT over the requests both arms measured in it
  (:func:`specbench.analysis.headline_rounds.round_log_ratios`), and the row shows the *decode speed ratio*
  (its reciprocal: decode tok/s per stream, method over reference); the ratio is their geometric mean, its interval the rule's
  confidence sequence (t-corrected for a spread estimated from few rounds), and the verdict three-way:
  *faster* / *slower* beyond ±:data:`HEADLINE_MARGIN`, *same* within, else *undecided*; the row keeps
  the rounds it rests on and how many would decide it. In a run of one round (the arms measured minutes
  apart, not interleaved): the prompt bootstrap's 95 % interval of the pooled ratio, *faster* / *slower*
  when it lies above / below 1, else *not distinguishable*. A K sweep's best K says in how many rounds it was also the
  fastest (``best_k_wins``).

A K sweep (a method run at several K) gets, per load, its points, the best K
(highest per-stream output tok/s, with a bootstrap interval over prompts) and
the slope of the time per decoding step over K (:mod:`specbench.analysis.step_time`),
bootstrapped over the prompts measured at every K.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from specbench import stats
from specbench.analysis import step_time
from specbench.analysis.ab_decision import ABRule, margin_code
from specbench.analysis.headline_rounds import choose_k, decide_pair, decode_speed_ratio
from specbench.analysis.metrics import paired_speedup
from specbench.results import counters, speed_estimators
from specbench.results.parts import HeadlineRow, KPoint, KSweep, PublishedClaim, Verdict
from specbench.results.records import RequestRecord
from specbench.results.summary import GroupSummary, is_ratio_reference, reference_applies
from specbench.stats import Estimate


def group_family(g: GroupSummary) -> str:
    """The method as the suite names it (the same for every K of a sweep)."""
    return g.family or g.method


def _usable(g: GroupSummary) -> bool:
    """A group the headline compares: measured, speculative, and lossless (a lossy group's speedup is no drafter's)."""
    return g.status in ("ok", "partial") and g.method_kind != "baseline" and g.n_requests > 0 and g.lossy is None


def _rate(g: GroupSummary) -> float:
    v = g.output_tps.value if g.output_tps is not None else None
    return -np.inf if v is None else v


def best_group(groups: Sequence[GroupSummary]) -> GroupSummary:
    """The group with the highest per-stream output tok/s (the smaller K on a tie); without timings
    (the reference engine) the one with the highest τ."""
    def tau(g: GroupSummary) -> float:
        return g.tau.value if g.tau is not None and g.tau.value is not None else -np.inf

    return max(groups, key=lambda g: (_rate(g), tau(g), -(g.k or 0)))


#: The headline's margin (issue 36): a method is *faster* / *slower* than the reference only beyond ±5 %, the
#: *same* when the interval lies within (docs/speed.md, "The headline's verdicts").
HEADLINE_MARGIN = 0.05
#: The headline decides as ``specbench ab`` does (its α, its t-corrected confidence sequence) with the headline's
#: margin, from the second round on: a run decides once, at its end, on the rounds its suite has (the gate's
#: twelve-round minimum guards its looks after every round; ``docs/speed.md``, "The headline's verdicts").
HEADLINE_RULE = ABRule(margin=HEADLINE_MARGIN, min_rounds=2)


def speedup_ratio_verdict(ratio: Estimate, rounds: int | None = None) -> Verdict:
    """The verdict of a speedup ratio (method over reference): measured in ``rounds`` interleaved rounds,
    the A/B rule's three ways with :data:`HEADLINE_MARGIN`; measured in one go, whether the interval holds 1."""
    if ratio.value is None:
        return "no data"
    if rounds is not None:  # the method is B, and a lower throughput is the regression side: worse = −log(ratio)
        lo, hi = ratio.ci_low or 0.0, ratio.ci_high if ratio.ci_high is not None else math.inf
        worse_lo = -math.log(hi) if hi > 0 else math.inf
        worse_hi = -math.log(lo) if lo > 0 else math.inf
        code = int(margin_code(worse_lo, worse_hi, math.log1p(HEADLINE_MARGIN)))
        return ("undecided", "same", "slower", "faster")[code]
    if ratio.ci_low is not None and ratio.ci_low > 1:
        return "faster"
    if ratio.ci_high is not None and ratio.ci_high < 1:
        return "slower"
    return "not distinguishable"


def paired_tau_ratio(method: Sequence[RequestRecord], reference: Sequence[RequestRecord]) -> Estimate:
    """τ_method / τ_reference over the prompts both measured (all samples and repeats of a prompt
    move together), from each request's counters; bootstrap over those prompts."""
    rows: dict[str, list[float]] = {}
    for col, reqs in ((0, method), (2, reference)):
        for r in reqs:
            if r.error is None and r.spec is not None:
                row = rows.setdefault(r.prompt_id, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
                row[col] += r.spec.num_accepted_tokens
                row[col + 1] += r.spec.num_drafts
                row[4 + col // 2] = 1.0
    shared = [v[:4] for _, v in sorted(rows.items()) if v[4] and v[5]]
    if not shared:
        return Estimate(value=None, n=0)

    def ratio(a: np.ndarray) -> float:
        s = a.sum(axis=0)
        if s[1] <= 0 or s[3] <= 0:
            return float("nan")
        return float(counters.tau(s[0], s[1]) / counters.tau(s[2], s[3]))

    def ratios(blk: np.ndarray) -> np.ndarray:  # ratio of each resample in a block (b, n, 4)
        s = blk.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = counters.tau(s[:, 0], s[:, 1]) / counters.tau(s[:, 2], s[:, 3])
        return np.where((s[:, 1] > 0) & (s[:, 3] > 0), out, np.nan)

    arr = np.array(shared, float)
    if not np.isfinite(ratio(arr)):  # an arm drafted nothing on these prompts (e.g. ngram on sampled text)
        return Estimate(value=None, n=len(shared))
    return stats.bootstrap(arr, ratio, batched=ratios)


def _claims(published: Sequence[dict], target: str, method: str, g: GroupSummary) -> list[PublishedClaim]:
    """The published ratios for ``method`` (a suite label) on ``g``'s dataset, temperature and K."""
    return [
        PublishedClaim(metric=p["metric"], value=float(p["value"]), high=p.get("high"), source=str(p["source"]))
        for p in published
        if is_ratio_reference(p) and reference_applies(p, target=target, methods=(method,), dataset=g.dataset,
                                                       temperature=g.temperature, k=g.k)
    ]


def _headline_point(arms: Sequence[GroupSummary], group_requests: dict[str, list[RequestRecord]],
                    rule: ABRule) -> tuple[GroupSummary, list[int]]:
    """A family's point for the headline, and its tie: with speed rounds, the paired rule's K
    (:func:`~specbench.analysis.headline_rounds.choose_k`); in a run of one round, the best group."""
    timed = {g.k: group_requests.get(g.group_id, []) for g in arms}
    if len(arms) < 2 or not any(r.round is not None for recs in timed.values() for r in recs):
        return best_group(arms), []
    choice = choose_k(timed, rule)
    g = next(g for g in arms if g.k == choice.k)
    return g, list(choice.tie) if len(choice.tie) > 1 else []


def headline_ratios(
    groups: Sequence[GroupSummary],
    group_requests: dict[str, list[RequestRecord]],
    reference_of: dict[str, str],
    published: Sequence[dict] = (),
    speed_requests: dict[str, list[RequestRecord]] | None = None,
    rule: ABRule = HEADLINE_RULE,
) -> list[HeadlineRow]:
    """One row per (target, dataset, temperature, load, method other than the reference).

    ``group_requests``: the suite's single pass (τ, the pooled speed of a run of one round);
    ``speed_requests``: those with the headline's speed rounds on repeats of the prompts (default: the same)."""
    speed = group_requests if speed_requests is None else speed_requests
    buckets: dict[tuple, dict[str, list[GroupSummary]]] = defaultdict(lambda: defaultdict(list))
    plain: dict[tuple, GroupSummary] = {}
    for g in groups:
        if _usable(g):
            buckets[g.baseline_key][group_family(g)].append(g)
        elif g.method_kind == "baseline" and g.status in ("ok", "partial") and g.n_requests > 0 and g.slice is None:
            plain[g.baseline_key] = g
    out: list[HeadlineRow] = []
    for key, fams in buckets.items():
        target = key[0]
        ref_name = reference_of.get(target)
        if ref_name not in fams:
            continue
        ref_point, ref_tie = _headline_point(fams[ref_name], speed, rule)
        # The reference itself against no speculation (its best K), where the run has the baseline: the anchor.
        pairs = [(name, arms, ref_point, ref_tie, ref_name) for name, arms in fams.items() if name != ref_name]
        if key in plain:
            pairs.insert(0, (ref_name, fams[ref_name], plain[key], [], plain[key].method))
        for name, arms, ref, ref_tie, against in pairs:
            g, tie = (ref_point, ref_tie) if name == ref_name else _headline_point(arms, speed, rule)
            m_reqs, r_reqs = group_requests.get(g.group_id, []), group_requests.get(ref.group_id, [])
            pooled = paired_speedup(m_reqs, r_reqs)
            sp, rounds, to_decide, instances, stalled = pooled, None, None, None, 0
            decision, units = decide_pair(speed.get(g.group_id, []), speed.get(ref.group_id, []), rule)
            if units.log_ratios.size >= 2:  # interleaved rounds: the A/B rule, the method as B
                # the decode speed ratio, saying the rounds it rests on (its units may be instances)
                sp = decode_speed_ratio(decision).model_copy(update={"rounds": units.rounds})
                rounds, to_decide = units.rounds, decision.rounds_to_decide
                instances, stalled = units.instances, units.stalled_rounds
            tau = paired_tau_ratio(m_reqs, r_reqs)
            out.append(
                HeadlineRow(
                    target=target, dataset=g.dataset, temperature=g.temperature, batch_size=g.batch_size,
                    request_rate=g.request_rate, method=name, method_kind=g.method_kind, method_group=g.group_id,
                    method_k=g.k, reference=against, reference_group=ref.group_id, reference_k=ref.k,
                    n_prompts=max(pooled.n, tau.n), tau_ratio=tau, speedup_ratio=sp,
                    method_speedup=g.speedup, reference_speedup=ref.speedup,
                    verdict=speedup_ratio_verdict(sp, rounds), rounds=rounds, rounds_to_decide=to_decide,
                    instances=instances, stalled_rounds=stalled, method_k_tie=tie, reference_k_tie=ref_tie,
                    published=_claims(published, target, name, g),
                )
            )
    return out


def _per_prompt(points: Sequence[GroupSummary], group_requests: dict[str, list[RequestRecord]],
                cols) -> np.ndarray:
    """Rows per prompt measured at every point: ``cols(requests of one prompt at one point)`` side by side."""
    per: list[dict[str, list[RequestRecord]]] = []
    for g in points:
        d: dict[str, list[RequestRecord]] = defaultdict(list)
        for r in group_requests.get(g.group_id, []):
            if r.error is None:
                d[r.prompt_id].append(r)
        per.append(d)
    rows = []
    for pid in sorted(set.intersection(*(set(d) for d in per)) if per else set()):
        row: list[float] = []
        for d in per:
            vals = cols(d[pid])
            if vals is None:
                break
            row += vals
        else:
            rows.append(row)
    return np.array(rows, float)


def _rate_cols(reqs: list[RequestRecord]) -> list[float] | None:
    ok = [r for r in reqs if r.latency_s]
    return [float(sum(r.num_output_tokens for r in ok)), float(sum(r.latency_s or 0 for r in ok))] if ok else None


def _step_cols(reqs: list[RequestRecord]) -> list[float] | None:
    rows = step_time.step_rows(reqs, speculative=True)
    return [float(sum(d for _, d, _ in rows)), float(sum(s for _, _, s in rows))] if rows else None


def best_k(points: Sequence[GroupSummary], group_requests: dict[str, list[RequestRecord]]) -> Estimate:
    """The K with the highest Σ tokens / Σ latency; its interval: the percentile interval of that
    argmax over prompts resampled (prompts measured at every K)."""
    ks = np.array([g.k or 0 for g in points], float)
    arr = _per_prompt(points, group_requests, _rate_cols)
    if arr.size == 0:
        return Estimate(value=float(best_group(points).k or 0), n=0)

    def argmax_k(a: np.ndarray) -> float:
        s = a.sum(axis=0)
        rates = np.where(s[1::2] > 0, speed_estimators.token_rate(s[0::2], np.where(s[1::2] > 0, s[1::2], 1)),
                         -np.inf)
        return float(ks[int(np.argmax(rates))])

    return stats.bootstrap(arr, argmax_k)


def best_k_wins(points: Sequence[GroupSummary], group_requests: dict[str, list[RequestRecord]],
                best: float | None) -> Estimate | None:
    """How often ``best`` K is also the fastest K within one speed round (None without rounds)."""
    rounds = sorted({r.round for g in points for r in group_requests.get(g.group_id, []) if r.round is not None})
    if len(rounds) < 2 or best is None:
        return None
    wins = 0
    for rnd in rounds:
        rates = []
        for g in points:
            ok = [r for r in group_requests.get(g.group_id, []) if r.round == rnd and r.error is None and r.latency_s]
            lat = sum(r.latency_s or 0.0 for r in ok)
            rate = speed_estimators.token_rate(sum(r.num_output_tokens for r in ok), lat) if lat > 0 else -np.inf
            rates.append((rate, -(g.k or 0), g.k or 0))
        wins += int(max(rates)[2] == round(best))
    return stats.wilson(wins, len(rounds))


def step_time_slope(points: Sequence[GroupSummary], group_requests: dict[str, list[RequestRecord]]) -> Estimate:
    """Least-squares slope of the pooled time per decoding step over K (seconds per extra K)."""
    ks = np.array([g.k or 0 for g in points], float)
    arr = _per_prompt(points, group_requests, _step_cols)
    if arr.size == 0 or len(set(ks)) < 2:
        return Estimate(value=None, n=0)

    def slope(a: np.ndarray) -> float:
        s = a.sum(axis=0)
        if np.any(s[1::2] <= 0):
            return float("nan")
        return float(np.polyfit(ks, speed_estimators.step_time(s[0::2], s[1::2]), 1)[0])

    return stats.bootstrap(arr, slope)


def k_sweeps(groups: Sequence[GroupSummary], group_requests: dict[str, list[RequestRecord]]) -> list[KSweep]:
    """A :class:`KSweep` per method run at several K, per (target, dataset, temperature, load)."""
    buckets: dict[tuple, list[GroupSummary]] = defaultdict(list)
    for g in groups:
        if _usable(g) and g.family is not None and g.k is not None:
            buckets[(*g.baseline_key, g.family)].append(g)
    out: list[KSweep] = []
    for key, ks in buckets.items():
        if len(ks) < 2:
            continue
        points = sorted(ks, key=lambda g: g.k or 0)
        g0 = points[0]
        best = best_k(points, group_requests)
        out.append(
            KSweep(
                target=g0.target, method=key[-1], method_kind=g0.method_kind, dataset=g0.dataset,
                temperature=g0.temperature, batch_size=g0.batch_size, request_rate=g0.request_rate,
                points=[
                    KPoint(k=g.k or 0, group_id=g.group_id, n=g.n_requests, tau=g.tau, speedup=g.speedup,
                           output_tps=g.output_tps, tpot_s=g.tpot_s, step_time_s=g.step_time_s)
                    for g in points
                ],
                best_k=best,
                best_k_wins=best_k_wins(points, group_requests, best.value),
                step_time_slope_s=step_time_slope(points, group_requests),
            )
        )
    return out
