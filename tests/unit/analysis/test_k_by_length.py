"""K by batch size and input length (issue 52), on hand-built speed rounds: the best K moves with length, the
batch-size-only schedule's K is the pooled choice, and its loss at the length it does not suit is decided."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.factories import group, request, run_summary

from specbench.analysis.k_by_length import k_by_length
from specbench.analysis.method_comparison import HEADLINE_RULE
from specbench.frames import k_by_length_frame
from specbench.report.compact import render_compact
from specbench.report.k_length_section import k_length_section
from specbench.results.parts import SummaryExtra
from specbench.results.slices import Slice

#: decode tok/s by (input tokens, K): K = 3 pays at 128 tokens, K = 1 at 768; pooled, K = 3 is faster
RATES = {(128, 1): 100.0, (128, 3): 200.0, (768, 1): 100.0, (768, 3): 100.0 / 1.2}


def _groups_and_requests(batch: int = 1, rounds: int = 8, noise: float = 0.01):
    rng = np.random.default_rng(0)
    groups, reqs = [], {}
    for (n, k), rate in RATES.items():
        g = group(f"eagle3-k{k}", "eagle3", k, batch_size=batch, family="eagle3", status="ok",
                  slice=Slice(input_tokens=n), group_id=f"t/eagle3-k{k}/d/T0/b{batch}/input_tokens={n}")
        groups.append(g)
        drift = [math.exp(0.05 * rng.standard_normal()) for _ in range(rounds)]  # shared by the Ks of a round
        reqs[g.group_id] = [request(g.group_id, f"p{i}@{n}", tokens=33, ttft_s=0.0,
                                    latency_s=32 / (rate * drift[r] * math.exp(noise * rng.standard_normal())),
                                    round=r, instance=0)
                            for r in range(rounds) for i in range(2)]
    return groups, reqs


def test_the_batch_only_k_loses_where_the_best_k_moves_with_length():
    groups, reqs = _groups_and_requests()
    rows = {r.input_tokens: r for r in k_by_length(groups, reqs, HEADLINE_RULE)}
    assert sorted(rows) == [128, 768]
    short, long = rows[128], rows[768]
    assert (short.best_k, short.batch_k, short.verdict) == (3, 3, "same K") and short.speed_ratio.value == 1.0
    assert (long.best_k, long.batch_k) == (1, 3) and long.ks == [1, 3]
    assert long.speed_ratio.value == pytest.approx(1 / 1.2, rel=0.03) and long.verdict == "slower"
    assert long.speed_ratio.ci_high < 1 / 1.05 and long.rounds == 8 and long.instances == 1


def test_one_length_or_one_k_makes_no_rows():
    groups, reqs = _groups_and_requests()
    only_short = [g for g in groups if g.slice.input_tokens == 128]
    assert k_by_length(only_short, reqs, HEADLINE_RULE) == []
    only_k3 = [g for g in groups if g.k == 3]
    assert k_by_length(only_k3, reqs, HEADLINE_RULE) == []


def test_the_report_compact_summary_and_frame_show_the_cells():
    groups, reqs = _groups_and_requests()
    rows = k_by_length(groups, reqs, HEADLINE_RULE)
    summary = run_summary(groups, extra=SummaryExtra(k_by_length=rows))
    sec = k_length_section(summary)
    assert sec is not None and sec.anchor == "k-by-length"
    table = sec.blocks[1].blocks[0]
    assert [line[:5] for line in table.rows] == [["1", "128", "1,3", "3", "3"], ["1", "768", "1,3", "1", "3"]]
    assert table.rows[0][5] == "1× (same K)" and table.rows[1][6].startswith("slower (8 rounds)")
    assert "## K by batch size and input length" in render_compact(summary)
    frame = k_by_length_frame(summary)
    assert list(frame["verdict"]) == ["same K", "slower"] and frame.loc[1, "speed_ratio_hi"] < 1
