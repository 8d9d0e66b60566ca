"""The headline's speed decision over rounds and engine instances (pure; issue 51).

A headline pair is a method at one K against the reference method (EAGLE-3) at one K, on the same target,
dataset, temperature and load. Their requests are paired within a speed round (same round, same engine
instance, same prompt, sample and repeat: both arms ran it seconds apart), and per round the log ratio of
their pooled TPOT (:func:`~specbench.results.speed_estimators.round_log_ratio` of
:func:`~specbench.analysis.ab_rounds.round_values`' ``tpot_s``: Σ (latency − TTFT) / Σ (output tokens − 1))
is one observation; the row shows its reciprocal, the **decode speed ratio** (the method's decode tok/s per
stream over the reference's, > 1: the method is faster).

**Why decode time, not latency.** The methods differ in how they decode; their prefill is the target's (plus
the drafter's own, which TTFT shows). Output tok/s per stream (Σ tokens / Σ latency) carries the TTFT of every
request, and on the CPU stand-in TTFT was where most of the spread between units lay: on suites/cpu-headline
(6 instances, blocks covering the prompt set) the sd of the instance units' log ratio was 0.03–0.06 with
latency and 0.009–0.019 with decode time (docs/measurements.md), so the same instances decide far more rows.

**The unit.** An engine instance carries an offset of its own (where its memory landed, how its threads were
placed): rounds measured on one pair of instances share it, so their spread does not contain it and an
interval over them cannot cover it (an A/A with one instance per arm gave TPOT B/A 0.936 [0.886, 0.989]).
A run with headline speed blocks (:class:`~specbench.config.suite_models.HeadlineSpeedSpec`) starts every
engine afresh for each block of rounds, and the rule's unit is the block: the mean log ratio of a block's
rounds, one value per pair of instances. The instance offset is then part of the units' spread, which the
rule's t-corrected confidence sequence estimates; a block is the smallest unit whose spread contains it
(a random-effects model would estimate the same between-instance variance from the same few instances, and
a fresh pair per round pays a restart per round for what a block pays once). A run whose records carry one
instance (no blocks) keeps the round as the unit and says so (``instances == 1``).

**Stalls.** On a shared machine a request is now and then paused outright (a 2-core VM held one for 3.4 s: its
time per decoding step 4.4× its prompt's other runs, identical work at T = 0), and one such round moves its
instance's unit further than the instance offsets the rule is sized for. A request whose time per decoding
step (decode time / target forward passes) exceeds :data:`STALL_FACTOR` × the median of its cell's requests
stalled; the instance's block in which a request of either arm stalled is left out of the pair's units, whole
(its rounds cover the prompt set only together: a block short of a round would carry that round's prompts' own
ratio), and the row counts the rounds left out (``stalled_rounds``; with one instance, the rounds are the units
and only the stalled round goes). Nothing else reads the choice. A slow machine slows every
request alike and is not a stall; the factor lies far outside the spread of a cell's step times (≤ 1.3× over a
run's instances on the CPU stand-in, 1.6× in its noisiest run).

**Best K.** Among the Ks a method ran, the one with the lowest pooled TPOT over its rounds is compared
with each other K by the same rule; a K the rule does not find slower ties with it, and the headline
compares the cheapest K of the tie (shown as a tie): an argmax that flips on noise decides nothing.

**Out of reach.** A pair whose true ratio sits near the margin needs more instances than a suite allows
(on the CPU stand-in, GSM8k n-gram and P-EAGLE against EAGLE-3 project 6 to thousands). Each instance restarts
every engine of every open pair, so such a pair spends the blocks' budget that a pair still within reach needs.
Once a pair rests on :data:`OUT_OF_REACH_FROM` instance units, its interval excludes a 15 % difference either
way, and the rule's projection (the unit at which its interval would clear the margin, if its estimate and
spread held: ``rounds_to_decide``) lies beyond the suite's instance cap, it gets no more blocks: it stays
*undecided*, with its interval and projection, and the rule itself is unchanged (a stop for lack of reach
decides nothing; it only stops spending).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from specbench.analysis.ab_decision import ABRule, ABVerdict, block_units, decide
from specbench.analysis.ab_rounds import round_values
from specbench.analysis.step_time import step_rows
from specbench.config.plan import Cell
from specbench.config.suite_models import HeadlineSpeedSpec
from specbench.results import speed_estimators
from specbench.results.parts import HeadlineRow
from specbench.results.records import RequestRecord
from specbench.stats import Estimate

METRIC = "tpot_s"  # what the rule decides on: pooled TPOT per round (the method as B; lower is faster)
#: Instance units a pair rests on before a projection may stop its blocks (:func:`out_of_reach`): from fewer,
#: the spread is estimated on ≤ 2 degrees of freedom (its own sd over half its size) and the interval is wide
#: (± 8.4 unit sds at 3 units, 4.2 at 4), so a stop there would leave rows wide open.
OUT_OF_REACH_FROM = 4
#: ... and only once its interval excludes a difference of 15 % either way (inside [0.85, 1/0.85]): a pair is given
#: up as undecided only when what is left open is smaller than that (issue 51: no difference of 15 % undecided).
OUT_OF_REACH_RESOLUTION = 0.15


#: A request whose time per decoding step exceeds this multiple of its cell's median stalled (see the module).
STALL_FACTOR = 2.0
#: Requests a cell needs before its median says what a stall is.
STALL_MIN_REQUESTS = 4


class PairUnits(NamedTuple):
    """The units one headline pair is decided on: ``log_ratios`` (method over reference, one per unit, in
    run order), how many rounds and engine instances they rest on, what a unit is, and how many rounds were
    left out because a request in them stalled."""

    log_ratios: np.ndarray
    rounds: int
    instances: int
    stalled_rounds: int = 0

    @property
    def unit(self) -> str:
        return "instance" if self.instances > 1 else "round"


def _round_key(r: RequestRecord) -> tuple[int, int]:
    return (r.instance or 0, r.round if r.round is not None else 0)


def stalled_rounds(records: Sequence[RequestRecord]) -> set[tuple[int, int]]:
    """``(instance, round)`` of every speed round in which one of ``records`` stalled: its time per decoding
    step over :data:`STALL_FACTOR` × the median of its cell's requests (a cell with fewer than
    :data:`STALL_MIN_REQUESTS` timed requests has no median to judge by)."""
    by_cell: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.round is not None:
            by_cell[r.cell_id].append(r)
    out: set[tuple[int, int]] = set()
    for recs in by_cell.values():
        rows = step_rows(recs, speculative=any(r.spec is not None for r in recs))
        if len(rows) < STALL_MIN_REQUESTS:
            continue
        per_step = [d / n for _, d, n in rows]
        limit = STALL_FACTOR * float(np.median(per_step))
        out.update(_round_key(r) for (r, _, _), t in zip(rows, per_step, strict=True) if t > limit)
    return out


def round_log_ratios(method: Sequence[RequestRecord], reference: Sequence[RequestRecord]
                     ) -> list[tuple[int, int, float]]:
    """``(instance, round, log(TPOT method / TPOT reference))`` per speed round both arms measured, over the
    requests both measured in it (same instance, round, prompt, sample and repeat), in run order (< 0: the
    method decodes faster)."""
    def key(r: RequestRecord) -> tuple:
        return (*_round_key(r), r.prompt_id, r.sample_index, r.repeat)

    ref = {key(r): r for r in reference if r.error is None and r.latency_s and r.round is not None}
    pairs: dict[tuple[int, int], tuple[list[RequestRecord], list[RequestRecord]]] = defaultdict(lambda: ([], []))
    for r in method:
        if r.error is None and r.latency_s and r.round is not None and key(r) in ref:
            pairs[_round_key(r)][0].append(r)
            pairs[_round_key(r)][1].append(ref[key(r)])
    out = []
    for (inst, rnd), (m, b) in sorted(pairs.items()):
        vm, vb = round_values(m, True).get(METRIC), round_values(b, True).get(METRIC)
        if vm and vb:
            out.append((inst, rnd, float(speed_estimators.round_log_ratio(vm, vb))))
    return out


def pair_units(method: Sequence[RequestRecord], reference: Sequence[RequestRecord]) -> PairUnits:
    """The pair's units: per engine instance, the mean log ratio of its rounds when the rounds span two
    instances or more; else each round's log ratio (one instance: its offset is not in the interval). An
    instance in which a request of either arm stalled (:func:`stalled_rounds`) is left out whole (with one
    instance, the stalled round)."""
    stalled = stalled_rounds([*method, *reference])
    every = round_log_ratios(method, reference)
    if len({inst for inst, _, _ in every}) > 1:
        gone = {inst for inst, _ in stalled}
        rounds = [x for x in every if x[0] not in gone]
    else:
        rounds = [x for x in every if (x[0], x[1]) not in stalled]
    units, instances = block_units([(inst, lr) for inst, _, lr in rounds])
    return PairUnits(units, len(rounds), instances, len(every) - len(rounds))


def decide_pair(method: Sequence[RequestRecord], reference: Sequence[RequestRecord], rule: ABRule
                ) -> tuple[ABVerdict, PairUnits]:
    """The rule's verdict on the method (B) against the reference (A) over the pair's units (its ratio is the
    TPOT ratio, method over reference: :func:`decode_speed_ratio` turns it the speed way)."""
    units = pair_units(method, reference)
    return decide(units.log_ratios, METRIC, rule), units


def out_of_reach(verdict: ABVerdict, units: PairUnits, cap: int | None) -> bool:
    """Whether an undecided pair should get no more blocks: it rests on at least :data:`OUT_OF_REACH_FROM`
    instances, its interval already excludes a difference of :data:`OUT_OF_REACH_RESOLUTION` either way, and
    the rule projects no verdict within ``cap`` instances (``rounds_to_decide`` beyond it, or none: an estimate
    right on the margin). False without a cap, on rounds of one instance, or when the
    spread is nil (nothing to project from)."""
    if cap is None or verdict.verdict != "undecided" or verdict.spread is None or verdict.spread <= 0:
        return False
    return _past_reach(units.instances, verdict.ratio, verdict.rounds_to_decide, cap)


def _past_reach(instances: int, ratio: Estimate, to_decide: int | None, cap: int) -> bool:
    """The out-of-reach test on an undecided pair's numbers (its TPOT ratio or the decode speed ratio: the
    bounds are symmetric in log), shared by the blocks' stop and the report's account of it."""
    lo, hi, floor = ratio.ci_low, ratio.ci_high, 1 - OUT_OF_REACH_RESOLUTION
    if instances < OUT_OF_REACH_FROM or lo is None or hi is None or lo < floor or hi > 1 / floor:
        return False  # too few units to project from, or a 15 % difference still open: keep going
    return to_decide is None or to_decide > cap


def decode_speed_ratio(verdict: ABVerdict) -> Estimate:
    """The decode speed ratio of a pair's verdict: the reciprocal of its TPOT ratio (method over reference),
    i.e. the method's decode tok/s per stream over the reference's, with the interval's ends swapped."""
    r = verdict.ratio

    def inv(x: float | None) -> float | None:
        return None if x is None else (math.inf if x == 0 else 1.0 / x)

    return r.model_copy(update={"value": inv(r.value), "ci_low": inv(r.ci_high), "ci_high": inv(r.ci_low)})


class KChoice(NamedTuple):
    """A method's K for the headline: ``k`` (the cheapest of the tie), ``fastest`` (the K with the highest
    pooled rate) and ``tie`` (the Ks the rule does not find slower than the fastest, itself included);
    ``open``: Ks whose comparison with the fastest is undecided (more rounds could split the tie)."""

    k: int | None
    fastest: int | None
    tie: tuple[int, ...]
    open: tuple[int, ...]


def choose_k(points: Mapping[int | None, Sequence[RequestRecord]], rule: ABRule) -> KChoice:
    """The headline's K among ``points`` (K → its requests), by the paired rule (see the module)."""
    ks = list(points)
    if len(ks) == 1:
        return KChoice(ks[0], ks[0], tuple(k for k in ks if k is not None), ())
    def tpot(k: int | None) -> float:  # pooled over all its rounds, as a round's is computed
        return round_values(points[k], True).get(METRIC) or float("inf")

    fastest = min(ks, key=lambda k: (tpot(k), k or 0))  # the lowest TPOT; the smaller K on a tie
    tie, still_open = [fastest], []
    for k in ks:
        if k == fastest:
            continue
        verdict, _ = decide_pair(points[k], points[fastest], rule)
        if verdict.verdict in ("same", "undecided"):  # not found slower than the fastest: a tie
            tie.append(k)
        if verdict.verdict == "undecided":
            still_open.append(k)
    k = min(tie, key=lambda x: x or 0)
    return KChoice(k, fastest, tuple(sorted(x for x in tie if x is not None)),
                   tuple(sorted(x for x in still_open if x is not None)))


def open_headline_cells(cells: Sequence[Cell], records: Mapping[str, Sequence[RequestRecord]],
                        reference_of: Mapping[str, str], rule: ABRule, cap: int | None = None) -> set[str]:
    """The cells that need more headline speed rounds: those of every pair (a method at its K against the
    reference at its K, and the reference against no speculation, per target, dataset, temperature, load and
    slice) the rule leaves undecided and ``cap`` instances can still decide (:func:`out_of_reach`), and of
    every K whose comparison with its family's fastest is undecided. The K of each arm is chosen as the
    headline chooses it (:func:`choose_k`), from the records so far; repeats are pooled."""
    slots: dict[tuple, dict[str, dict[int | None, list[str]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    plain: dict[tuple, list[str]] = defaultdict(list)
    for c in cells:
        if c.method_kind == "baseline" and c.stop is None and not c.slice_id:
            plain[c.baseline_group_key].append(c.cell_id)
        elif c.method_kind != "baseline" and c.lossy is None and c.stop is None:
            slots[c.baseline_group_key][c.method_family][c.k].append(c.cell_id)
    out: set[str] = set()
    for key, fams in slots.items():
        ref_name = reference_of.get(key[0])
        if ref_name not in fams:
            continue

        def recs(ids: list[str]) -> list[RequestRecord]:
            return [r for cid in ids for r in records.get(cid, ())]

        choices = {name: choose_k({k: recs(ids) for k, ids in ks.items()}, rule) for name, ks in fams.items()}
        for name, choice in choices.items():  # Ks not yet split from the fastest
            if choice.open:
                out.update(cid for k in (*choice.open, choice.fastest) for cid in fams[name][k])
        ref_cells = fams[ref_name][choices[ref_name].k]
        pairs = [(fams[name][choice.k], ref_cells) for name, choice in choices.items() if name != ref_name]
        if plain.get(key):  # the reference against no speculation (the headline's anchor row)
            pairs.append((ref_cells, plain[key]))
        for method_cells, against in pairs:
            verdict, units = decide_pair(recs(method_cells), recs(against), rule)
            if verdict.verdict == "undecided" and not out_of_reach(verdict, units, cap):
                out.update(method_cells)
                out.update(against)
    return out


def why_blocks_ended(spec: HeadlineSpeedSpec, rows: Sequence[HeadlineRow]) -> str | None:
    """Why a run's headline speed blocks ended, from its decided rows and the suite's ``headline:``: every pair
    decided, the instances spent, or (pairs open, instances left) the budget — or an engine that did not start
    again, whose cells then failed. None without rows decided on rounds."""
    ruled = [r for r in rows if r.rounds is not None and not r.tau_only]
    if not ruled:
        return None
    ran = max(r.instances or 1 for r in ruled)
    open_ = sum(r.verdict == "undecided" for r in ruled)
    if not open_:
        return f"every headline pair decided, after {ran} of at most {spec.instances} engine instances"
    beyond = [r for r in ruled if r.verdict == "undecided"
              and _past_reach(r.instances or 1, r.speedup_ratio, r.rounds_to_decide, spec.instances)]
    if ran < spec.instances and len(beyond) == open_:
        return (f"every headline pair decided or out of reach after {ran} of at most {spec.instances} engine "
                f"instances: {open_} of {len(ruled)} pair(s) undecided, each projected to need more instances than "
                "the cap (it says how many) and given no more blocks")
    if ran >= spec.instances:
        return (f"{ran} engine instances, the suite's cap, ran; {open_} of {len(ruled)} pair(s) stay undecided "
                "(each says how many instances would decide it)")
    return (f"the budget (the suite's budget_s, or --budget) ended the blocks after {ran} of {spec.instances} "
            f"engine instances with {open_} of {len(ruled)} pair(s) undecided (a failed cell would say an engine did not start again)")
