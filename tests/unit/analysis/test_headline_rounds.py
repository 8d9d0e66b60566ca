"""Issue 36: the headline inside one run is an A/B — paired by speed round and decided by the A/B rule
(hand-built records with rounds); rounds that split sampled cells and alternate the engines' order (ABBA)."""

from __future__ import annotations

import itertools
import math

import numpy as np
from support.factories import cell, cell_record, request

from specbench.analysis import headline_rounds, metrics
from specbench.analysis import method_comparison as comparison
from specbench.analysis.ab_decision import decide
from specbench.analysis.metrics import paired_speedup
from specbench.config.plan import prompts_per_batch, round_order, round_spans
from specbench.results.records import RequestRecord
from specbench.stats import Estimate

REF, METHOD = cell("eagle3", "eagle3", 3), cell("dflash", "dflash", 3)


def _arm(c, rate_by_round: list[float], prompts_per_round: int = 4) -> list[RequestRecord]:
    """Requests of 20 tokens; in round r each is served at ``rate_by_round[r]`` tok/s."""
    out = []
    for r, rate in enumerate(rate_by_round):
        for i in range(prompts_per_round):
            rec = request(c, f"p{r * prompts_per_round + i}", tokens=20, ttft_s=0.0, latency_s=20 / rate)
            out.append(rec.model_copy(update={"round": r}))
    return out


def _lr(method, ref) -> np.ndarray:
    return np.array([lr for _, _, lr in headline_rounds.round_log_ratios(method, ref)], float)


def _rows(factor: float, rounds: int, noise: tuple[float, ...] = (1.02, 0.98, 1.01, 0.99)):
    drift = [100.0, 60.0, 90.0, 70.0]  # the machine's drift: both arms of a round share it
    ref = _arm(REF, drift[:rounds])
    method = _arm(METHOD, [d * factor * e for d, e in zip(drift[:rounds], noise, strict=False)])
    return method, ref


def _headline(method, ref):
    base = _arm(cell("baseline"), [50.0] * len({r.round for r in ref}))
    cells = [REF, METHOD, cell("baseline")]
    reqs = method + ref + base
    crs = [cell_record(c, num_requests=16, wall_time_s=1.0) for c in cells]
    summary = metrics.summarize("r", "s", cells, crs, reqs)
    greqs = metrics.requests_by_group(cells, metrics.latest_cell_records(crs), metrics.unique_requests(reqs))
    anchor, row = comparison.headline_ratios(summary.groups, greqs, {"t": "eagle3"})
    assert (anchor.method, anchor.reference) == ("eagle3", "baseline")  # the reference against no speculation
    return row


def test_the_headline_in_rounds_is_decided_by_the_ab_rule() -> None:
    for factor, noise, want in ((1.3, (1.02, 0.98, 1.01, 0.99), "faster"), (0.7, (1.02, 0.98, 1.01, 0.99), "slower"),
                                (1.0, (1.002, 0.998, 1.001, 0.999), "same")):
        method, ref = _rows(factor, 4, noise)
        lr = _lr(method, ref)
        # TPOT's way (the drift shared by a round cancels); the row shows the reciprocal, the decode speed ratio
        assert np.allclose(lr, -np.log(factor * np.array(noise)))
        row = _headline(method, ref)
        want_ratio = headline_rounds.decode_speed_ratio(decide(lr, "tpot_s", comparison.HEADLINE_RULE))
        assert row.speedup_ratio == want_ratio and row.speedup_ratio.method == "confidence sequence"
        assert math.isclose(row.speedup_ratio.value, math.exp(-lr.mean()))  # type: ignore[arg-type]
        assert (row.verdict, row.rounds, row.rounds_to_decide) == (want, 4, None), (factor, row)
    # 8 % faster with ±10 % round-to-round noise: four rounds cannot tell it from the margin; the row says how
    # many would (at this ratio and spread)
    row = _headline(*_rows(1.08, 4, (1.1, 0.9, 1.05, 0.95)))
    assert row.verdict == "undecided" and row.rounds == 4 and row.rounds_to_decide is not None and row.rounds_to_decide > 4
    # the rule's interval is what the verdict reads; a ratio near the margin is undecided, not called either way
    assert comparison.speedup_ratio_verdict(Estimate(value=1.04, ci_low=0.99, ci_high=1.09, n=16, rounds=4), 4) == "undecided"
    assert comparison.speedup_ratio_verdict(Estimate(value=1.08, ci_low=1.06, ci_high=1.10, n=16, rounds=4), 4) == "faster"
    # the same interval in a run of one go: only whether it holds 1
    assert comparison.speedup_ratio_verdict(Estimate(value=1.03, ci_low=1.01, ci_high=1.05, n=16)) == "faster"
    assert comparison.speedup_ratio_verdict(Estimate(value=1.03, ci_low=1.01, ci_high=1.05, n=16, rounds=4), 4) == "undecided"
    assert comparison.speedup_ratio_verdict(Estimate(value=1.02, ci_low=0.98, ci_high=1.04, n=16)) == "not distinguishable"


def test_rounds_count_only_where_both_arms_were_timed() -> None:
    method, ref = _rows(1.3, 4)
    assert _lr(method, [r for r in ref if r.round != 3]).size == 3
    assert _lr([r.model_copy(update={"round": None}) for r in method], ref).size == 0
    # one round in common: a run of one go, the prompt bootstrap and whether its interval holds 1
    row = _headline(method, [r for r in ref if r.round == 0])
    assert row.rounds is None and row.speedup_ratio.method != "confidence sequence"
    assert row.verdict == "faster" and row.speedup_ratio == paired_speedup(
        [r for r in method if r.round == 0], [r for r in ref if r.round == 0])


def test_headline_rows_carry_their_rounds_and_verdicts() -> None:
    row = _headline(*_rows(1.3, 4))
    assert (row.method, row.verdict, row.rounds, row.n_prompts) == ("dflash", "faster", 4, 16)


def test_sampled_cells_split_into_rounds_of_whole_batches() -> None:
    assert prompts_per_batch(4, 4) == 1 and prompts_per_batch(4, 1) == 4 and prompts_per_batch(1, 4) == 1
    assert prompts_per_batch(8, 4) == 2 and prompts_per_batch(4, 3) == 4
    # cpu-smoke's T=0.5 cells: 4 prompts × 4 samples at batch 4 were one round, now four
    assert round_spans(4, 4, 4, samples_per_prompt=4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert round_spans(4, 4, 4) == [(0, 4)]
    for n, r, b, s in ((8, 4, 4, 2), (12, 3, 4, 3), (5, 4, 2, 4)):
        spans = round_spans(n, r, b, s)
        assert [i for a, z in spans for i in range(a, z)] == list(range(n))
        assert all(((z - a) * s) % b == 0 for a, z in spans[:-1])  # whole batches of (prompt, sample) pairs


def test_round_order_is_balanced_over_each_pair_of_rounds() -> None:
    keys = [f"tiny--m{i}" for i in range(6)]
    for j in range(3):
        first, second = round_order(keys, 2 * j, seed=3), round_order(keys, 2 * j + 1, seed=3)
        for a, b in itertools.combinations(keys, 2):  # every two engines: each went first once
            assert (first.index(a) < first.index(b)) != (second.index(a) < second.index(b))
        assert {first.index(k) + second.index(k) for k in keys} == {len(keys) - 1}  # the same mean place
