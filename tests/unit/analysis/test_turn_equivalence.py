"""The sampled (T > 0) equivalence test per conversation turn (issue 24), on hand-built records and
hand-built ``equivalence.jsonl`` rows: every turn slice of a conversation group carries the test on its
own samples (with n), the turns' counts add up to the group's, a divergence planted in turn 2 only is
flagged in turn 2 only, and the report's per-turn table shows each turn's verdict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from support.factories import cell, cell_record, request

from specbench.analysis.equivalence import equivalence_summaries
from specbench.analysis.pipeline import summarize_run
from specbench.config.plan import Cell
from specbench.report.markdown import render_markdown
from specbench.results.manifest import RunManifest
from specbench.results.records import RequestRecord
from specbench.results.requests import turn_prompt_id
from specbench.results.rundir import EQUIVALENCE

CONVERSATIONS, TOKENS = 12, 300  # per request: 12 × 300 = 3600 tokens per turn, enough to show equivalence


def _rows_and_records(cells: list[Cell], rng: np.random.Generator) -> tuple[list[dict], list[RequestRecord]]:
    """Two-turn conversations in each cell; PIT values uniform, except the method's turn 2 pushed up."""
    rows, recs = [], []
    for c in cells:
        for i in range(CONVERSATIONS):
            for turn in (1, 2):
                pid = turn_prompt_id(f"q{i}", turn)
                u = rng.random(TOKENS)
                if c.method_kind != "baseline" and turn == 2:
                    u = np.sqrt(u)  # density 2u: a planted divergence
                rows.append({"cell_id": c.cell_id, "prompt_id": pid, "sample_index": 0, "repeat": 0,
                             "temperature": 1.0, "top_p": 1.0, "order": "probability", "scorer": "hand",
                             "f_minus": u.tolist(), "p": [0.0] * TOKENS})  # p = 0: the PIT value is F(x-)
                recs.append(request(c, pid, tokens=[1] * TOKENS, output_text="x", latency_s=1.0, ttft_s=0.1,
                                    conversation_id=f"q{i}", turn=turn, conversation_turns=2))
    return rows, recs


def test_sampled_test_per_turn_adds_up_and_flags_turn_two_only(tmp_path: Path) -> None:
    cells = [cell("baseline", temperature=1.0), cell("eagle3", k=3, temperature=1.0)]
    rows, recs = _rows_and_records(cells, np.random.default_rng(0))
    (tmp_path / EQUIVALENCE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    equivalence = equivalence_summaries(tmp_path, cells, recs)
    gid = cells[1].group_id
    assert set(equivalence) == {gid, f"{gid}/turn=1", f"{gid}/turn=2"}  # the baseline is not tested

    cell_records = [cell_record(c, wall_time_s=1.0, num_requests=2 * CONVERSATIONS) for c in cells]
    manifest = RunManifest.load({"run_id": "r", "suite_name": "s", "suite": {
        "name": "s", "targets": [{"name": "t", "model": "m", "methods": [{"method": "baseline"}]}],
        "datasets": [{"name": "d", "kind": "spec_bench"}]}})
    summary = summarize_run(manifest, cells, cell_records, recs, equivalence=equivalence)
    whole = summary.group(gid)
    turns = [summary.group(f"{gid}/turn={t}") for t in (1, 2)]
    assert whole is not None and whole.equivalence is not None and whole.equivalence.sampled is not None
    overall = whole.equivalence.sampled
    sampled = []
    for s in turns:
        assert s is not None and s.equivalence is not None and s.equivalence.sampled is not None
        sampled.append(s.equivalence.sampled)
    # Each turn's test is on its own samples: its n, and the turns add up to the whole group's.
    assert [t.n_requests for t in sampled] == [CONVERSATIONS, CONVERSATIONS]
    assert [t.n_tokens for t in sampled] == [CONVERSATIONS * TOKENS] * 2
    assert sum(t.n_requests or 0 for t in sampled) == overall.n_requests == 2 * CONVERSATIONS
    assert sum(t.n_tokens or 0 for t in sampled) == overall.n_tokens
    assert sum(t.n_baseline_tokens or 0 for t in sampled) == overall.n_baseline_tokens
    # The divergence planted in turn 2 is flagged there, and only there.
    assert sampled[0].verdict == "equivalent", sampled[0].reason
    assert sampled[1].verdict == "divergent" and overall.verdict == "divergent"
    assert all(t.baseline_group == cells[0].group_id for t in [*sampled, overall])

    md = render_markdown(summary, manifest)
    table = md[md.index("## Conversation turns"):]
    assert "| Sampled test |" in table and "on each turn's samples alone" in table
    row1 = next(ln for ln in table.splitlines() if ln.startswith(f"| {gid} | 1 |"))
    row2 = next(ln for ln in table.splitlines() if ln.startswith(f"| {gid} | 2 |"))
    assert f"equivalent (p={sampled[0].pvalue:.3g}; n={CONVERSATIONS} requests, {CONVERSATIONS * TOKENS} tokens)" in row1
    assert "divergent (p=" in row2 and "equivalent" not in row2
