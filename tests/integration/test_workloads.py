"""Workloads on real vLLM CPU (issue 24): the cpu-workloads suite run once (three Spec-Bench categories,
ten two-turn conversations, offline and reference engines), read by every test here; and a reference-only
copy of it stopped with SIGKILL in the middle of its conversations, then resumed.

- per-category τ and speedup recomputed by hand from ``records.jsonl`` equal the summary (1e-12), and
  the requests of all categories add up to the group's;
- every turn-2 prompt holds the same conversation's turn-1 output from the same engine, as the target's
  chat template renders it (the engine's own rendering; checked by prompt length, which leaving the
  reply out changes);
- the reference cross-check covers turn 2;
- the category matrix, turn table and heatmap render in Markdown and in HTML (headless Chromium);
- SIGKILL mid-conversation + ``--resume``: every conversation recorded once, complete.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from specbench import api
from specbench.results import rundir
from specbench.results.records import RequestRecord

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "suites" / "cpu-workloads.yaml"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, kept_engines) -> tuple[Path, api.RunSummary]:
    out = tmp_path_factory.mktemp("workloads")
    run_dir = api.run(SUITE, out=out, keep=kept_engines)  # the baseline and EAGLE-3 of test_speed_rounds, when kept
    return run_dir, api.load_summary(run_dir)


def _records(run_dir: Path) -> list[RequestRecord]:
    return rundir.read_requests(run_dir)


def _categories(run_dir: Path) -> dict[str, str]:
    return {o["prompt_id"]: o["meta"]["category"] for o in rundir.iter_jsonl(run_dir / rundir.PROMPTS)}


def test_per_category_tau_and_speedup_recompute_from_records(run: tuple[Path, api.RunSummary]) -> None:
    run_dir, summary = run
    cats = _categories(run_dir)
    recs = [r for r in _records(run_dir) if r.error is None]
    cell_of = {c.cell_id: g.group_id for g in summary.whole_groups for c in g.cells}
    by_group: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in recs:
        by_group[cell_of[r.cell_id]].append(r)
    base = next(g for g in summary.whole_groups if g.target == "tiny" and g.method == "baseline")
    assert len({cats[p] for p in cats}) == 3
    for g in summary.whole_groups:
        slices = [s for s in summary.groups if s.group_id.startswith(g.group_id + "/category=")]
        assert sorted(s.slice.category for s in slices if s.slice) == ["coding", "translation", "writing"]
        assert sum(s.n_requests for s in slices) == g.n_requests == 25  # 15 first turns + 10 second turns
        for s in slices:
            assert s.slice is not None
            mine = [r for r in by_group[g.group_id] if cats[r.conversation_id or r.prompt_id] == s.slice.category]
            if g.method_kind != "baseline":
                tau = 1 + sum(r.spec.num_accepted_tokens for r in mine if r.spec) / sum(
                    r.spec.num_drafts for r in mine if r.spec)
                assert s.tau is not None and abs(s.tau.value - tau) < 1e-12, s.group_id  # type: ignore[operator]
            if g.target == "tiny" and g.method_kind != "baseline":
                b = {(r.prompt_id): r for r in by_group[base.group_id]
                     if cats[r.conversation_id or r.prompt_id] == s.slice.category}
                t1 = {r.conversation_id: r.output_token_ids for r in by_group[base.group_id] if r.turn == 1}
                same = {r.conversation_id for r in mine if r.turn == 1 and t1[r.conversation_id] == r.output_token_ids}
                paired = [r for r in mine if r.turn == 1 or r.conversation_id in same]
                sp = (sum(r.num_output_tokens for r in paired) / sum(r.latency_s or 0 for r in paired)) / (
                    sum(b[r.prompt_id].num_output_tokens for r in paired)
                    / sum(b[r.prompt_id].latency_s or 0 for r in paired))
                assert s.speedup is not None and abs(s.speedup.value - sp) < 1e-12, s.group_id  # type: ignore[operator]
    assert {c.category for c in summary.extra.category_matrix} == {"coding", "translation", "writing"}


def test_turn_two_prompts_hold_the_same_engines_turn_one_reply(run: tuple[Path, api.RunSummary]) -> None:
    from transformers import AutoTokenizer

    from specbench.engines.vllm_offline import _render_chat
    from specbench.zoo.assets import ensure_assets_for

    run_dir, summary = run
    tok = AutoTokenizer.from_pretrained(ensure_assets_for("trained").target)  # the target the engines served
    questions = {o["prompt_id"]: o for o in rundir.iter_jsonl(run_dir / rundir.PROMPTS)}
    by_cell: dict[str, dict[tuple[str, int], RequestRecord]] = defaultdict(dict)
    for r in _records(run_dir):
        if r.conversation_id is not None:
            by_cell[r.cell_id][(r.conversation_id, r.turn or 0)] = r
    checked = sensitive = 0
    for cell, recs in by_cell.items():
        convs = sorted({cid for cid, t in recs if t == 2})
        assert len(convs) == 10, cell
        for cid in convs:
            q = questions[cid]
            one, two = recs[(cid, 1)], recs[(cid, 2)]

            def length(reply: str, q: dict = q) -> int:
                msgs = [*q["messages"], {"role": "assistant", "content": reply},
                        {"role": "user", "content": q["later_turns"][0]}]
                return len(tok(_render_chat(tok, msgs, {}), add_special_tokens=False).input_ids)

            assert one.output_token_ids and two.prompt_tokens == length(one.output_text), (cell, cid)
            # Without its turn-1 reply the prompt would be shorter: the reply is in it.
            sensitive += length("") < two.prompt_tokens
            checked += 1
    assert checked == sensitive == 10 * len(by_cell) and len(by_cell) == 4
    turn2 = [row for row in summary.extra.cross_check if row.vllm_group.endswith("turn=2")]
    assert len(turn2) == 1 and turn2[0].reference_group.startswith("tiny-ref/eagle3/")


def test_matrix_turns_and_heatmap_render(run: tuple[Path, api.RunSummary], tmp_path: Path) -> None:
    run_dir, summary = run
    paths = api.report(run_dir, tmp_path / "reports")
    md = paths["markdown"].read_text()
    assert "## Categories" in md and "## Conversation turns" in md and "| Method·K | coding (n=5)" in md
    html = paths["html"].read_text()
    assert "Categories" in html and "Conversation turns" in html and "τ by prompt category" in html
    browser = _html_browser_module()  # the same headless Chromium check (skips without Chromium)
    result = browser.inspect(paths["html"].resolve().as_uri(), tmp_path / "profile")
    assert result["errors"] == [] and result["external"] == [] and result["images_ok"] is True
    assert result["n_images"] == html.count('src="data:image/png;base64,') >= 1


def _html_browser_module() -> Any:
    spec = importlib.util.spec_from_file_location("_html_browser", Path(__file__).with_name("test_html_browser.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(600)
def test_sigkill_mid_conversation_and_resume_record_each_conversation_once(tmp_path: Path, cli_runs) -> None:
    suite = yaml.safe_load(SUITE.read_text())
    suite["name"] = "workloads-kill"
    suite["targets"] = [t for t in suite["targets"] if t.get("engine") == "reference"]
    path = tmp_path / "kill.yaml"
    path.write_text(yaml.safe_dump(suite))
    out = tmp_path / "out"
    proc = cli_runs.start(path, out)
    run_dir = cli_runs.wait_for(lambda: (cli_runs.run_dirs(out, "workloads-kill") or [None])[0], 300)
    cli_runs.wait_for(lambda: cli_runs.n_records(run_dir) >= 1, 300)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    raw = [json.loads(x) for x in (run_dir / rundir.RECORDS).read_text().splitlines() if x.strip()]
    assert 0 < len(raw) < 25, "the kill should land while conversations are under way"
    assert all(r["turn"] == 1 or any(q["conversation_id"] == r["conversation_id"] and q["turn"] == 1 for q in raw)
               for r in raw)
    resumed = cli_runs.start(path, out, "--resume", str(run_dir))
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output
    turns: dict[str, list[int]] = defaultdict(list)
    for r in rundir.iter_jsonl(run_dir / rundir.RECORDS):
        turns[r["conversation_id"]].append(r["turn"])
    assert len(turns) == 15
    assert all(t == list(range(1, len(t) + 1)) and len(t) in (1, 2) for t in turns.values()), turns
    assert sum(len(t) == 2 for t in turns.values()) == 10
