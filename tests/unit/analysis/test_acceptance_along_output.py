"""Acceptance along the output (issue 52), from hand-built step traces: a step's place in the output is found by
walking its trace, a drafter whose acceptance falls along the output shows the fall bucket by bucket, and the
stored buckets are what the records give when walked again by hand."""

from __future__ import annotations

import random

import pytest
from support.factories import cell, cell_record, request
from support.step_walk import walked_buckets

from specbench import frames
from specbench.analysis import metrics
from specbench.analysis.acceptance_along_output import (
    BUCKET_TOKENS,
    acceptance_along_output,
    first_draft_positions,
    zoo_trained_tokens,
)
from specbench.analysis.pipeline import summarize_run
from specbench.config.plan import Cell
from specbench.report.markdown import render_markdown
from specbench.report.plots import make_figures
from specbench.results.manifest import RunManifest
from specbench.results.records import RequestRecord, StepTrace

K = 3


def _trace(accept_at: float, fall: float, tokens: int, rng: random.Random) -> StepTrace:
    """Steps of K drafts until ``tokens`` are emitted; each draft of a step accepted (in a chain) with a
    probability that starts at ``accept_at`` and drops by ``fall`` per 100 output positions."""
    drafted, accepted, pos = [], [], 1
    while pos < tokens:
        p = max(0.0, accept_at - fall * pos / 100)
        a = 0
        while a < K and rng.random() < p:
            a += 1
        drafted.append(K)
        accepted.append(a)
        pos += a + 1
    return StepTrace(drafted=drafted, accepted=accepted, complete=True, source="vllm")


def _requests(c: Cell, n: int, fall: float, *, tokens: int = 256, seed: int = 0) -> list[RequestRecord]:
    rng = random.Random(seed)
    return [request(c, f"p{i}", tokens=tokens, prompt_tokens=40 + i, latency_s=1.0, ttft_s=0.1,
                    steps=_trace(0.9, fall, tokens, rng)) for i in range(n)]


def test_a_steps_place_is_found_by_walking_the_trace() -> None:
    trace = StepTrace(drafted=[3, 3, 0, 3], accepted=[2, 0, 0, 3], complete=True, source="vllm")
    assert first_draft_positions(trace) == [1, 4, 5, 6]  # the prefill emits 0; each step accepted + 1 more


def test_acceptance_that_falls_along_the_output_shows_the_fall() -> None:
    c = cell("eagle3", k=K)
    recs = _requests(c, 24, fall=0.25)
    (g,) = metrics.summarize_groups([c], [cell_record(c, wall_time_s=1.0)], recs)
    (row,) = acceptance_along_output([g], {g.group_id: recs})
    rates = [b.rate for b in row.buckets]
    assert [b.start for b in row.buckets] == list(range(0, 256, BUCKET_TOKENS))
    assert all(a.value > b.value for a, b in zip(rates, rates[1:], strict=False))  # type: ignore[operator]
    assert rates[0].ci_low > rates[-1].ci_high  # type: ignore[operator]  # the first bucket's interval above the last's
    assert rates[0].n == 24 and rates[0].method == "bootstrap"
    flat = _requests(c, 24, fall=0.0, seed=1)
    (g,) = metrics.summarize_groups([c], [cell_record(c, wall_time_s=1.0)], flat)
    (row,) = acceptance_along_output([g], {g.group_id: flat})
    first, last = row.buckets[0].rate, row.buckets[-1].rate
    assert first.ci_low < last.ci_high and last.ci_low < first.ci_high  # type: ignore[operator]  # no fall: they overlap


def test_incomplete_traces_are_left_out_and_counted() -> None:
    c = cell("ngram", k=K)
    recs = _requests(c, 6, fall=0.0)
    partial = [r.model_copy(update={"steps": r.steps.model_copy(update={"complete": False})}) if i % 2 else r  # type: ignore[union-attr]
               for i, r in enumerate(recs)]
    (g,) = metrics.summarize_groups([c], [cell_record(c, wall_time_s=1.0)], partial)
    (row,) = acceptance_along_output([g], {g.group_id: partial})
    assert (row.requests, row.incomplete) == (3, 3) and row.buckets[0].requests == 3


def test_the_stored_buckets_are_the_records_walked_again_and_the_report_shows_them() -> None:
    cells = [cell("baseline"), cell("eagle3", k=K)]
    recs = [request(cells[0], f"p{i}", tokens=256, latency_s=1.0, ttft_s=0.1) for i in range(16)]
    recs += _requests(cells[1], 16, fall=0.2)
    manifest = RunManifest.load({"run_id": "r", "suite_name": "s", "suite": {
        "name": "s", "targets": [{"name": "t", "model": "tiny", "methods": [{"method": "baseline"}]}],
        "datasets": [{"name": "d", "kind": "humaneval"}]}})
    summary = summarize_run(manifest, cells, [cell_record(c, wall_time_s=1.0) for c in cells], recs)
    (row,) = summary.extra.acceptance_along_output
    walked = walked_buckets([r for r in recs if r.cell_id == cells[1].cell_id], BUCKET_TOKENS)
    assert {b.start // BUCKET_TOKENS: (b.accepted, b.drafted, b.steps, b.requests) for b in row.buckets} == walked
    for b in row.buckets:
        acc, dr, _, n = walked[b.start // BUCKET_TOKENS]
        assert b.rate.value == pytest.approx(acc / dr) and b.rate.n == n
    trained = zoo_trained_tokens()
    assert trained == 256 and row.trained_tokens == trained  # the zoo's training length, stated for model: tiny
    assert (row.past_training_from, row.past_training_all) == (trained - 55, trained - 40)  # prompts of 40–55 tokens
    report = render_markdown(summary)
    assert "## Acceptance along the output" in report and "| eagle3 | 3 | T=0 · load 1 | 16 |" in report
    assert f"from output position {trained - 55} on some request's prompt and output together pass {trained}" in report
    assert "acceptance_along_output" in make_figures(summary)
    frame = frames.output_acceptance_frame(summary)
    assert list(frame["rate"]) == [b.rate.value for b in row.buckets] and set(frame["rate_n"]) == {16}


def test_a_group_that_never_drafted_has_no_row() -> None:
    c = cell("eagle3-k0", "eagle3", k=K)
    recs = [request(c, f"p{i}", tokens=40, steps=StepTrace(drafted=[0] * 39, accepted=[0] * 39, complete=True,
                                                            source="vllm")) for i in range(4)]
    (g,) = metrics.summarize_groups([c], [cell_record(c, wall_time_s=1.0)], recs)
    assert acceptance_along_output([g], {g.group_id: recs}) == []
