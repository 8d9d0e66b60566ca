"""Input length as an axis, on real vLLM CPU: suites/cpu-lengths.yaml (baseline, EAGLE-3 and P-EAGLE at
64, 256 and 768 input tokens, 2 prompts each; 3 engines).

Checks the issue's: every record's prompt tokens are the requested length plus the chat template's fixed
overhead (10 tokens for the zoo's ChatML template); τ and speedup per length recomputed from the records
equal the summary and the report; each length is its own slice, compared with the baseline and EAGLE-3 at
that length; the manifest records how prefix caching is kept from flattering longer prompts.
"""

from __future__ import annotations

import json

import pytest

from specbench import api
from specbench.report.markdown import render_markdown
from specbench.results import rundir

LENGTHS = [64, 256, 768]
ZOO_CHAT_OVERHEAD = 10  # '<|im_start|>user\n' … '<|im_end|>\n<|im_start|>assistant\n' in the zoo's tokenizer


@pytest.fixture(scope="module")
def lengths_run(repo, tmp_path_factory):
    run_dir = api.run(repo / "suites" / "cpu-lengths.yaml", out=tmp_path_factory.mktemp("lengths"))
    return run_dir, api.load_summary(run_dir)


def _records_by_group(run_dir, s):
    cells = {c.cell_id: g.group_id for g in s.groups for c in g.cells}
    out: dict[str, list] = {}
    for r in rundir.read_requests(run_dir):
        if r.error is None:
            out.setdefault(cells[r.cell_id], []).append(r)
    return out


def test_every_record_has_its_length_plus_the_chat_overhead(lengths_run):
    run_dir, s = lengths_run
    prompts = {json.loads(line)["prompt_id"]: json.loads(line) for line in (run_dir / rundir.PROMPTS).open()}
    assert {p["meta"]["chat_overhead"] for p in prompts.values()} == {ZOO_CHAT_OVERHEAD}
    groups = {g.group_id: g for g in s.groups}
    records = _records_by_group(run_dir, s)
    assert len(records) == 3 * len(LENGTHS)
    for gid, recs in records.items():
        n = groups[gid].slice.input_tokens
        assert n in LENGTHS and len(recs) == 2
        for r in recs:
            assert prompts[r.prompt_id]["meta"]["input_tokens"] == n
            assert r.prompt_tokens == n + ZOO_CHAT_OVERHEAD, (gid, r.prompt_id, r.prompt_tokens)
    contexts = [p["meta"]["context"] for p in prompts.values()]
    assert len(contexts) == len(set(contexts)) == 2 * len(LENGTHS)  # no context shared between lengths


def test_tau_and_speedup_per_length_recompute_from_records(lengths_run):
    run_dir, s = lengths_run
    records = _records_by_group(run_dir, s)
    report = render_markdown(s, rundir.read_manifest(run_dir))
    for g in s.groups:
        n = g.slice.input_tokens
        if g.method_kind == "baseline":
            continue
        recs = records[g.group_id]
        tau = 1 + sum(r.spec.num_accepted_tokens for r in recs) / sum(r.spec.num_drafts for r in recs)
        assert g.tau.value == pytest.approx(tau, rel=1e-12), g.group_id
        base = next(b for b in s.groups if b.method_kind == "baseline" and b.slice.input_tokens == n)
        m = {(r.prompt_id, r.sample_index, r.repeat): r for r in recs}
        b = {(r.prompt_id, r.sample_index, r.repeat): r for r in records[base.group_id]}
        shared = m.keys() & b.keys()
        assert len(shared) == 2
        rate = [sum(len(x[k].output_token_ids) for k in shared) / sum(x[k].latency_s for k in shared) for x in (m, b)]
        assert g.speedup.value == pytest.approx(rate[0] / rate[1], rel=1e-9), g.group_id
        row = next(line for line in report.splitlines() if line.startswith(f"| {g.method} | {n} |"))
        assert f"{g.tau.value:.2f} [" in row and f"{g.speedup.value:.2f}× [" in row, row
    # P-EAGLE's ratio over EAGLE-3 is given at every length
    ratios = {r.method_group: r for r in s.headline}
    for g in s.groups:
        if g.method == "p-eagle":
            assert ratios[g.group_id].reference == "eagle3"
            assert ratios[g.group_id].reference_group.endswith(f"/input_tokens={g.slice.input_tokens}")


def test_the_manifest_records_the_lengths_and_prefix_caching(lengths_run):
    run_dir, _ = lengths_run
    src = rundir.read_manifest(run_dir)["datasets"]["context"]
    assert src["lengths"]["input_tokens"] == LENGTHS
    assert "distinct contexts per length" in src["lengths"]["prefix_caching"]
