"""Issue 51: the headline decided over engine instances (the block of rounds on one instance is the unit), the
best K by the paired rule (a tie, never a noisy argmax), and which cells need more rounds — on recorded rounds
built by hand."""

from __future__ import annotations

import math

import numpy as np
from support.factories import cell, request

from specbench.analysis import headline_rounds as hr
from specbench.analysis.method_comparison import HEADLINE_RULE
from specbench.stats import Estimate

REF3, REF1 = cell("eagle3-k3", "eagle3", 3, family="eagle3"), cell("eagle3-k1", "eagle3", 1, family="eagle3")
DFL = cell("dflash", "dflash", 3)
BASE = cell("baseline")


def _arm(c, rates: dict[tuple[int, int], float], prompts: int = 2) -> list:
    """Requests of 20 tokens; in (instance, round) each is served at the given tok/s."""
    return [request(c, f"p{i}", tokens=20, ttft_s=0.0, latency_s=20 / rate, round=rnd, instance=inst,
                    speed_only=rnd > 0)
            for (inst, rnd), rate in rates.items() for i in range(prompts)]


def _rates(offsets: list[float], rounds: int, factor: float = 1.0, noise: float = 0.0, seed: int = 0) -> dict:
    """(instance, round) → rate: a drift shared by both arms of a round, the instance's offset (method arm only:
    what one instance per arm hides) and per-round noise."""
    rng = np.random.default_rng(seed)
    out, r = {}, 0
    for inst, off in enumerate(offsets):
        for _ in range(rounds):
            out[(inst, r)] = 100.0 * factor * off * math.exp(noise * rng.standard_normal())
            r += 1
    return out


def _drift(offsets: list[float], rounds: int) -> dict:
    return {k: 100.0 for k in _rates(offsets, rounds)}


def test_the_unit_is_the_instance_when_rounds_span_instances() -> None:
    offsets = [1.00, 1.06, 0.95, 1.03]
    method, ref = _arm(DFL, _rates(offsets, 3)), _arm(REF3, _drift(offsets, 3))
    units = hr.pair_units(method, ref)
    assert (units.rounds, units.instances, units.unit) == (12, 4, "instance")
    assert np.allclose(units.log_ratios, -np.log(offsets))  # one mean per instance (TPOT's way), in order
    # one instance: each round is a unit, and its offset is invisible (a zero spread, a tight interval)
    one = hr.pair_units(_arm(DFL, _rates([1.06], 6)), _arm(REF3, _drift([1.06], 6)))
    assert (one.rounds, one.instances, one.unit) == (6, 1, "round") and np.allclose(one.log_ratios, -math.log(1.06))


def test_an_instance_offset_widens_the_interval_where_one_instance_would_not() -> None:
    """Identical arms with ±5 % instance offsets: over rounds of one instance pair the interval excludes 1 (the
    A/A of issue 51); over instances it holds 1."""
    rounds_only, _ = hr.decide_pair(_arm(DFL, _rates([1.05], 8, noise=0.01)), _arm(REF3, _drift([1.05], 8)),
                                    HEADLINE_RULE)
    assert hr.decode_speed_ratio(rounds_only).ci_low > 1.0  # type: ignore[operator]
    offsets = [1.05, 0.96, 1.02, 0.97, 1.04, 0.98]
    verdict, units = hr.decide_pair(_arm(DFL, _rates(offsets, 2, noise=0.01)), _arm(REF3, _drift(offsets, 2)),
                                    HEADLINE_RULE)
    speed = hr.decode_speed_ratio(verdict)
    assert units.instances == 6 and speed.ci_low < 1.0 < speed.ci_high  # type: ignore[operator]


def test_pairs_form_within_a_round_and_an_instance_only() -> None:
    method = _arm(DFL, _rates([1.0, 1.0], 2, factor=1.3))
    ref = _arm(REF3, _drift([1.0, 1.0], 2))
    assert len(hr.round_log_ratios(method, ref)) == 4
    moved = [r.model_copy(update={"instance": 7}) for r in ref if r.instance == 1]  # the same round, another instance
    assert len(hr.round_log_ratios(method, [r for r in ref if r.instance == 0] + moved)) == 2
    verdict, _ = hr.decide_pair(method, ref, HEADLINE_RULE)
    assert math.isclose(hr.decode_speed_ratio(verdict).value, 1.3)  # type: ignore[arg-type]
    assert math.isclose(verdict.ratio.value, 1 / 1.3)  # type: ignore[arg-type]  # the rule's own: TPOT's ratio


def test_best_k_is_a_tie_when_the_rule_cannot_split_it() -> None:
    offsets = [1.0] * 4
    k1 = _arm(REF1, _rates(offsets, 2, factor=1.00, noise=0.04, seed=1))
    k3 = _arm(REF3, _rates(offsets, 2, factor=1.02, noise=0.04, seed=2))
    choice = hr.choose_k({1: k1, 3: k3}, HEADLINE_RULE)
    assert choice.tie == (1, 3) and choice.k == 1  # the cheaper K of the tie is compared
    # clearly faster at K=3: K=3, no tie
    k3_fast = _arm(REF3, _rates(offsets * 2, 2, factor=1.5, noise=0.01, seed=3))
    k1_more = _arm(REF1, _rates(offsets * 2, 2, factor=1.0, noise=0.01, seed=4))
    choice = hr.choose_k({1: k1_more, 3: k3_fast}, HEADLINE_RULE)
    assert (choice.k, choice.fastest, choice.tie, choice.open) == (3, 3, (3,), ())
    assert hr.choose_k({3: k3}, HEADLINE_RULE).k == 3


def test_open_cells_are_those_of_undecided_pairs() -> None:
    offsets = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    ref = _arm(REF3, _rates(offsets, 2, noise=0.01, seed=5))
    fast = _arm(DFL, _rates(offsets, 2, factor=1.4, noise=0.01, seed=6))
    cells = [REF3, DFL, BASE]
    slow = _arm(BASE, _rates(offsets, 2, factor=0.6, noise=0.01, seed=9))
    by_cell = {REF3.cell_id: ref, DFL.cell_id: fast, BASE.cell_id: slow}
    assert hr.open_headline_cells(cells, by_cell, {"t": "eagle3"}, HEADLINE_RULE) == set()
    # two instances of a 3 % difference: undecided, both arms need more rounds; the baseline never does
    few = {REF3.cell_id: _arm(REF3, _rates([1, 1], 2, noise=0.02, seed=7)),
           DFL.cell_id: _arm(DFL, _rates([1, 1], 2, factor=1.03, noise=0.02, seed=8)), BASE.cell_id: slow}
    assert hr.open_headline_cells(cells, few, {"t": "eagle3"}, HEADLINE_RULE) == {REF3.cell_id, DFL.cell_id,
                                                                                BASE.cell_id}  # two units: nothing
    # the reference against no speculation is a pair too (the headline's anchor row): without the
    # baseline's rounds it is open, the baseline's cells with it
    assert BASE.cell_id in hr.open_headline_cells(cells, {**by_cell, BASE.cell_id: []}, {"t": "eagle3"},
                                                  HEADLINE_RULE)
    # no reference method in the target: no headline, nothing open
    assert hr.open_headline_cells(cells, few, {"t": "nothing"}, HEADLINE_RULE) == set()


def test_an_ab_run_with_instances_decides_on_blocks() -> None:
    """`specbench ab` with the suite's ``instances``: per group, one unit per instance (the mean of its rounds)."""
    from specbench.analysis.ab_rounds import paired_rounds

    a = cell("eagle3", "eagle3", 3, cell_id="t@a/eagle3/d/T0/b1/r0")
    b = cell("eagle3", "eagle3", 3, cell_id="t@b/eagle3/d/T0/b1/r0")
    offsets = [1.1, 0.9, 1.0]
    recs = _arm(a, _drift(offsets, 3)) + _arm(b, _rates(offsets, 3))
    units = paired_rounds(recs)["output_tps"]["t/eagle3/d/T0/b1"]
    assert np.allclose(units, np.log(offsets))
    one = paired_rounds([r.model_copy(update={"instance": None}) for r in recs])["output_tps"]["t/eagle3/d/T0/b1"]
    assert len(one) == 9  # one instance: the rounds are the units


def test_the_rule_reads_decode_time_not_the_first_token() -> None:
    """A round's observation is the TPOT ratio: a TTFT that differs between the arms (or wanders between
    instances) does not enter it; the decode speed ratio is its reciprocal."""
    offsets = [1.0, 1.0, 1.0]
    ref = _arm(REF3, _drift(offsets, 2))
    method = [r.model_copy(update={"ttft_s": 0.05 * (1 + r.instance), "latency_s": r.latency_s / 1.2 + 0.05 * (1 + r.instance)})
              for r in _arm(DFL, _drift(offsets, 2))]
    verdict, units = hr.decide_pair(method, ref, HEADLINE_RULE)
    assert np.allclose(units.log_ratios, -math.log(1.2))  # the TTFTs (0.05–0.15 s) are not in it
    assert math.isclose(hr.decode_speed_ratio(verdict).value, 1.2)  # type: ignore[arg-type]


def test_the_run_says_why_its_headline_blocks_ended() -> None:
    from specbench.analysis.headline_rounds import why_blocks_ended
    from specbench.config.suite_models import HeadlineSpeedSpec
    from specbench.results.parts import HeadlineRow

    def row(verdict: str, instances: int, rounds: int | None = 8, to_decide: int | None = 5) -> HeadlineRow:
        e = Estimate(value=1.0, ci_low=0.9, ci_high=1.1, n=4)
        return HeadlineRow(target="t", dataset="d", temperature=0.0, batch_size=1, method="m", method_kind="m",
                           method_group="g", method_k=3, reference="eagle3", reference_group="r", reference_k=3,
                           n_prompts=4, tau_ratio=e, speedup_ratio=e, verdict=verdict, rounds=rounds,
                           instances=instances, rounds_to_decide=to_decide if verdict == "undecided" else None)
    spec = HeadlineSpeedSpec(instances=6, budget_s=150)
    assert why_blocks_ended(spec, [row("faster", 3), row("same", 2)]).startswith(
        "every headline pair decided, after 3 of at most 6")
    assert why_blocks_ended(spec, [row("faster", 6), row("undecided", 6)]).startswith(
        "6 engine instances, the suite's cap, ran; 1 of 2")
    assert why_blocks_ended(spec, [row("undecided", 4), row("slower", 2)]).startswith(
        "the budget (the suite's budget_s, or --budget) ended the blocks after 4 of 6 engine instances with 1 of 2")
    # the pairs left undecided are all beyond the cap's reach (projected past 6 instances, or never, with an
    # interval inside [0.85, 1/0.85]); one whose interval still holds a 15 % difference was not: the budget ended it
    assert why_blocks_ended(spec, [row("undecided", 4, to_decide=9), row("undecided", 5, to_decide=None),
                                   row("faster", 5)]).startswith(
        "every headline pair decided or out of reach after 5 of at most 6 engine instances: 2 of 3")
    wide = row("undecided", 5, to_decide=9).model_copy(
        update={"speedup_ratio": Estimate(value=0.92, ci_low=0.84, ci_high=1.0, n=4)})
    assert why_blocks_ended(spec, [wide, row("faster", 5)]).startswith("the budget")
    assert why_blocks_ended(spec, [row("not distinguishable", 1, rounds=None)]) is None


def test_a_pair_the_cap_cannot_decide_gets_no_more_blocks() -> None:
    """A 4.5 % difference against a 5 % margin: its projection runs far past the cap. From four instances on, with
    an interval that excludes a 15 % difference, it is out of reach (its cells leave the open set, the verdict stays
    undecided); before, without a cap, or with a wider interval it is open; a pair projected within the cap too."""
    cells = [REF3, DFL]
    offsets = [1.0] * 4

    def pair(factor: float, n: int, seed: int) -> dict:
        return {REF3.cell_id: _arm(REF3, _rates(offsets[:n], 2, noise=0.004, seed=seed)),
                DFL.cell_id: _arm(DFL, _rates(offsets[:n], 2, factor=factor, noise=0.004, seed=seed + 1))}

    near = pair(1.045, 4, 11)
    verdict, units = hr.decide_pair(near[DFL.cell_id], near[REF3.cell_id], HEADLINE_RULE)
    assert verdict.verdict == "undecided" and units.instances == 4 and verdict.rounds_to_decide > 6  # type: ignore[operator]
    assert hr.out_of_reach(verdict, units, 6)
    assert hr.open_headline_cells(cells, near, {"t": "eagle3"}, HEADLINE_RULE, cap=6) == set()
    assert hr.open_headline_cells(cells, near, {"t": "eagle3"}, HEADLINE_RULE) == {REF3.cell_id, DFL.cell_id}
    wide = pair(1.045, 4, 11)  # the same estimate with an interval that still holds a 15 % difference: open
    wide[DFL.cell_id] = _arm(DFL, _rates(offsets, 2, factor=1.045, noise=0.08, seed=12))
    v3, u3 = hr.decide_pair(wide[DFL.cell_id], wide[REF3.cell_id], HEADLINE_RULE)
    assert v3.verdict == "undecided" and v3.ratio.ci_low < 0.85 and not hr.out_of_reach(v3, u3, 6)  # type: ignore[operator]
    three = pair(1.045, 3, 11)  # three instances: too few to project from
    assert hr.open_headline_cells(cells, three, {"t": "eagle3"}, HEADLINE_RULE, cap=6) == {REF3.cell_id, DFL.cell_id}
    within = pair(1.15, 4, 13)  # 15 %, noisier: undecided at four instances, projected within the cap
    within[DFL.cell_id] = _arm(DFL, _rates(offsets, 2, factor=1.15, noise=0.06, seed=16))
    v2, u2 = hr.decide_pair(within[DFL.cell_id], within[REF3.cell_id], HEADLINE_RULE)
    assert v2.verdict == "undecided" and v2.rounds_to_decide is not None and v2.rounds_to_decide <= 6
    assert not hr.out_of_reach(v2, u2, 6)
    assert hr.open_headline_cells(cells, within, {"t": "eagle3"}, HEADLINE_RULE, cap=6) == {REF3.cell_id, DFL.cell_id}


def test_an_instance_in_which_a_request_stalled_is_left_out() -> None:
    """A request paused outright (4× its cell's time per step: identical work at T = 0) moves its instance's unit
    far past the instance offsets; that instance's block is left out of the pair's units whole (both arms: a block
    short of a round would carry the other round's prompts alone), and its rounds are counted."""
    offsets = [1.0, 1.0, 1.0, 1.0, 1.0]
    ref = _arm(REF3, _rates(offsets, 2, noise=0.005, seed=21))
    method = _arm(DFL, _rates(offsets, 2, factor=1.2, noise=0.005, seed=22))
    clean, units = hr.decide_pair(method, ref, HEADLINE_RULE)
    assert units.stalled_rounds == 0 and (units.rounds, units.instances) == (10, 5)
    stalled = [r.model_copy(update={"latency_s": r.latency_s * 4}) if (r.instance, r.round, r.prompt_id) == (2, 4, "p0")
               else r for r in method]
    assert hr.stalled_rounds(stalled) == {(2, 4)}
    verdict, units = hr.decide_pair(stalled, ref, HEADLINE_RULE)
    assert units.stalled_rounds == 2 and (units.rounds, units.instances) == (8, 4)
    assert np.allclose(units.log_ratios, -math.log(1.2), atol=0.02)
    assert verdict.verdict == clean.verdict == "improved"
    kept = hr.round_log_ratios(stalled, ref)  # with the stall kept, its round reads the method 2.1× slower
    assert len(kept) == 10 and math.isclose(max(lr for _, _, lr in kept), math.log(2.5 / 1.2), rel_tol=0.05)
    # one instance: the rounds are the units, and only the stalled round goes
    one = [r for r in stalled if r.instance == 2]
    assert hr.pair_units(one, [r for r in ref if r.instance == 2]).rounds == 1
    # a machine slower for a whole instance is no stall: every request of instance 3 at 1.5×
    slow = [r.model_copy(update={"latency_s": r.latency_s * 1.5}) if r.instance == 3 else r for r in method]
    assert hr.stalled_rounds(slow) == set()
    # a cell with fewer than four timed requests has no median to judge by
    assert hr.stalled_rounds(stalled[:3]) == set()
