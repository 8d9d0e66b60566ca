"""Tokens per target step, terminal overcount and draft rate on hand-built step traces (exact arithmetic)."""

from __future__ import annotations

import pytest
from support.factories import group, request

from specbench import stats
from specbench.analysis.step_accounting import request_steps, step_metrics
from specbench.analysis.step_time import decoding_steps
from specbench.engines.step_trace import replay_ngram, trace_from_vllm
from specbench.results.records import RequestRecord, StepTrace


def trace(drafted: list[int], accepted: list[int], complete: bool = True, source: str = "vllm") -> StepTrace:
    return StepTrace(drafted=drafted, accepted=accepted, complete=complete, source=source)  # type: ignore[arg-type]


def record(n_out: int, steps: StepTrace | None, pid: str = "p") -> RequestRecord:
    return request("c", pid, tokens=n_out, prompt_tokens=3, steps=steps)


# EOS inside an accepted prefix, K=3: the prefill emits token 1; step 1 accepts 3 (+ bonus: tokens 2-5);
# step 2 accepts 2 drafts of which the first is EOS (token 6): 2 counted tokens (the 2nd draft, the bonus)
# lie past the end.
EOS = (6, trace([3, 3], [3, 2]))
# max_tokens=5 cuts a prefix: step 1 accepts 1 (tokens 2-3); step 2 accepts 3 but only tokens 4-5 fit.
MAX_TOKENS = (5, trace([3, 3], [1, 3]))
# Steps without a draft (ngram): 4 steps, 2 drafted; tokens 1 | 2 | 3,4,5 | 6 | 7,8.
NO_DRAFT = (8, trace([0, 3, 0, 2], [0, 2, 0, 1], source="vllm+ngram-replay"))


def test_eos_inside_an_accepted_prefix() -> None:
    s = request_steps(*EOS)
    assert s is not None and s.exact and s.fits
    assert (s.committed, s.steps, s.counted, s.overcount, s.drafting) == (5, (2, 2), 7, (2, 2), 2)
    # vLLM's τ for this request: 1 + 5/2 = 3.5; committed per step: 5/2 = 2.5; overcount 2/7 of τ's tokens.


def test_max_tokens_cutting_a_prefix() -> None:
    s = request_steps(*MAX_TOKENS)
    assert s is not None and (s.committed, s.steps, s.counted, s.overcount) == (4, (2, 2), 6, (2, 2))


def test_steps_without_a_draft() -> None:
    s = request_steps(*NO_DRAFT)
    assert s is not None and (s.committed, s.steps, s.counted, s.overcount, s.drafting) == (7, (4, 4), 5, (0, 0), 2)
    assert not s.all_drafted


def test_only_drafted_steps_known_gives_bounds() -> None:
    # vLLM's record of the same request: its two drafted steps only. Unknown: steps without a draft
    # = committed − counted + overcount, overcount in [0, last step's accepted] → steps in [4, 5].
    s = request_steps(8, trace([3, 2], [2, 1], complete=False))
    assert s is not None and not s.exact and s.fits
    assert (s.steps, s.overcount) == ((4, 5), (0, 1))


def test_a_complete_trace_that_does_not_fit_its_output_is_bounded_and_flagged() -> None:
    s = request_steps(10, trace([3], [3]))  # one step cannot commit 9 tokens: steps were skipped
    assert s is not None and not s.fits and not s.exact


def test_group_metrics_equal_hand_computation() -> None:
    recs = [record(*EOS, pid="a"), record(*MAX_TOKENS, pid="b")]
    m = step_metrics(recs)
    assert m is not None
    assert m.tokens_per_step.value == pytest.approx((5 + 4) / (2 + 2))
    assert m.tokens_per_step_per_request.value == pytest.approx((5 / 2 + 4 / 2) / 2)
    assert m.terminal_overcount.value == pytest.approx((2 + 2) / (7 + 6))
    rate = m.draft_rate
    assert (rate.value, rate.ci_low, rate.ci_high, rate.n, rate.method) == (1.0, 1.0, 1.0, 2, "exact")
    assert all(e.n == 2 for e in m)
    # Time per step divides by forward passes: 2 for each.
    assert [decoding_steps(r, speculative=True) for r in recs] == [2, 2]


def test_group_metrics_with_steps_without_a_draft() -> None:
    recs = [record(*NO_DRAFT, pid="a"), record(*EOS, pid="b")]
    m = step_metrics(recs)
    assert m is not None
    assert m.tokens_per_step.value == pytest.approx((7 + 5) / (4 + 2))
    assert m.draft_rate.value == pytest.approx((2 + 2) / (4 + 2))
    assert m.draft_rate.method == "bootstrap"
    assert m.terminal_overcount.value == pytest.approx(2 / (5 + 7))


def test_bounds_are_labelled_not_estimated() -> None:
    m = step_metrics([record(8, trace([3, 2], [2, 1], complete=False))])
    assert m is not None
    tps = m.tokens_per_step
    assert tps.value is None and tps.method == "bounds" and (tps.ci_low, tps.ci_high) == (7 / 5, 7 / 4)
    assert (m.draft_rate.ci_low, m.draft_rate.ci_high) == (2 / 5, 2 / 4)
    assert decoding_steps(record(8, trace([3, 2], [2, 1], complete=False)), speculative=True) is None


def test_a_group_with_a_request_without_trace_gets_no_step_metrics() -> None:
    assert step_metrics([record(*EOS), record(4, None, pid="x")]) is None


def test_all_equal_shares_get_a_wilson_interval_not_zero_width() -> None:
    e = stats.proportion_ci([0, 0, 0], [5, 6, 7])
    assert e.method == "wilson" and e.ci_low == 0.0 and e.ci_high is not None and e.ci_high > 0.1 and e.n == 18
    assert stats.proportion_ci([1, 0], [2, 3]).method == "bootstrap"


def test_ngram_replay_puts_back_the_steps_without_a_draft() -> None:
    # A proposer that drafts [9, 9, 9] once the context ends in 9, nothing otherwise.
    def propose(ctx: list[int]) -> list[int]:
        return [9, 9, 9] if ctx[-1] == 9 else []

    prompt, out = [1, 2], [5, 9, 9, 9, 7, 4]  # prefill: 5 | no draft: 9 | drafted, 2 accepted: 9 9 + bonus 7 | no: 4
    vllm = trace([3], [2], complete=False)
    got = replay_ngram(prompt, out, vllm, propose)
    assert got is not None and got.complete and got.source == "vllm+ngram-replay"
    assert (got.drafted, got.accepted) == ([0, 3, 0], [0, 2, 0])
    # vLLM saying the drafted step accepted a token the output does not have: the replay refuses.
    assert replay_ngram(prompt, out, trace([3], [3], complete=False), propose) is None
    assert replay_ngram(prompt, out, trace([3, 3], [2, 0], complete=False), propose) is None


def test_trace_from_vllm_reads_the_detailed_arrays() -> None:
    sd = {"acceptance_histogram": [0, 1, 1], "per_step_accepted": [1, 2], "per_step_drafted": [2, 2]}
    t = trace_from_vllm(sd, "eagle3")
    assert t is not None and t.complete and (t.drafted, t.accepted) == ([2, 2], [1, 2])
    t = trace_from_vllm(sd, "ngram")
    assert t is not None and not t.complete
    assert trace_from_vllm({"acceptance_histogram": [0, 1, 1]}, "eagle3") is None  # summary level: no arrays
    empty = trace_from_vllm({"acceptance_histogram": [0, 0, 0]}, "ngram")  # no step drafted: no arrays sent
    assert empty is not None and empty.drafted == [] and not empty.complete


def test_zero_width_intervals_on_few_units_are_flagged_unless_exact() -> None:
    from specbench.analysis.pipeline import zero_width_intervals
    from specbench.stats import Estimate

    g = group("m", "eagle3", 3, group_id="g",
              tau=Estimate(value=4.0, ci_low=4.0, ci_high=4.0, n=4, method="bootstrap"),
              draft_rate=Estimate(value=1.0, ci_low=1.0, ci_high=1.0, n=4, method="exact"),
              tpot_s=Estimate(value=0.1, ci_low=0.1, ci_high=0.1, n=12, method="bootstrap"),
              accuracy={"strict": Estimate(value=0.0, ci_low=0.0, ci_high=0.0, n=2, method="bootstrap")})
    assert zero_width_intervals([g]) == ["g (n=2): accuracy strict", "g (n=4): τ"]
