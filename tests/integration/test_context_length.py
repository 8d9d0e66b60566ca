"""Input length as an axis, on real vLLM CPU: suites/cpu-lengths.yaml (baseline, EAGLE-3 and P-EAGLE; HumanEval
code at 128, 384 and 768 input tokens, 2 prompts each, and Spec-Bench at 64 and 768, 1 prompt each; 3 engines).

Checks the issue's: every record's prompt tokens are the requested length plus the chat template's fixed
overhead for the zoo's target (HumanEval is sent raw: 0; Spec-Bench through its ChatML template:
10 tokens); τ and speedup per length recomputed from the records
equal the summary and the report; each length is its own slice, compared with the baseline and EAGLE-3 at
that length; the manifest records how prefix caching is kept from flattering longer prompts.
"""

from __future__ import annotations

import json

import pytest

from specbench.report.markdown import render_markdown
from specbench.results import rundir

LENGTHS = {"code": [128, 384, 768], "context": [64, 768]}
PER_LENGTH = {"code": 2, "context": 1}
# The chat template's fixed overhead for the zoo's target, per dataset: HumanEval is a raw completion prompt;
# Spec-Bench goes through '<|im_start|>user\n' … '<|im_end|>\n<|im_start|>assistant\n' (8 tokens with the
# tokenizer trained on the zoo's corpus mix: 3 special tokens, 'user', 'assistant' and 3 newlines).
OVERHEAD = {"code": 0, "context": 8}


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
    groups = {g.group_id: g for g in s.groups}
    records = _records_by_group(run_dir, s)
    assert len(records) == 3 * sum(len(v) for v in LENGTHS.values())
    for gid, recs in records.items():
        g = groups[gid]
        n = g.slice.input_tokens
        assert n in LENGTHS[g.dataset] and len(recs) == PER_LENGTH[g.dataset]
        for r in recs:
            p = prompts[r.prompt_id]
            assert p["dataset"] == g.dataset and p["meta"]["input_tokens"] == n
            assert p["meta"]["chat_overhead"] == OVERHEAD[g.dataset]
            assert r.prompt_tokens == n + OVERHEAD[g.dataset], (gid, r.prompt_id, r.prompt_tokens)
    for ds, lens in LENGTHS.items():
        contexts = [p["meta"]["context"] for p in prompts.values() if p["dataset"] == ds]
        assert len(contexts) == len(set(contexts)) == PER_LENGTH[ds] * len(lens)  # none shared between lengths


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
        base = next(b for b in s.groups if b.method_kind == "baseline" and b.slice == g.slice and b.dataset == g.dataset)
        m = {(r.prompt_id, r.sample_index, r.repeat): r for r in recs}
        b = {(r.prompt_id, r.sample_index, r.repeat): r for r in records[base.group_id]}
        shared = m.keys() & b.keys()
        assert len(shared) == PER_LENGTH[g.dataset]
        rate = [sum(len(x[k].output_token_ids) for k in shared) / sum(x[k].latency_s for k in shared) for x in (m, b)]
        assert g.speedup.value == pytest.approx(rate[0] / rate[1], rel=1e-9), g.group_id
        if g.dataset == "code":  # one table per dataset; its rows are the first with this method and length
            row = next(line for line in report.splitlines() if line.startswith(f"| {g.method} | {n} |"))
            assert f"{g.tau.value:.2f}" in row and f"{g.speedup.value:.2f}×" in row, row
    # P-EAGLE's ratio over EAGLE-3 is given at every length
    ratios = {r.method_group: r for r in s.headline}
    for g in s.groups:
        if g.method == "p-eagle":
            assert ratios[g.group_id].reference == "eagle3"
            assert ratios[g.group_id].reference_group.endswith(f"/input_tokens={g.slice.input_tokens}")


def test_the_manifest_records_the_lengths_and_prefix_caching(lengths_run):
    run_dir, _ = lengths_run
    for ds, lens in LENGTHS.items():
        lengths = rundir.read_manifest(run_dir).datasets[ds].lengths
        assert lengths is not None and lengths.input_tokens == lens
        assert "distinct contexts per length" in (lengths.prefix_caching or "")
