"""Workloads (issue 24) on hand-built data: categories of every dataset kind, chat_jsonl, category and
turn slices recomputed by hand, conversations written and resumed as units, the matrix in the report,
and bad input with file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.factories import cell, cell_record, counters, request, run_summary

from specbench.analysis.metrics import complete_conversations, pair_turns, paired_speedup, summarize_groups
from specbench.analysis.workload_slices import MIN_PROMPTS_FOR_INTERVAL, category_matrix, workload_slices
from specbench.config.plan import Cell, Plan
from specbench.config.suite import DatasetSpec, SuiteError, load_suite
from specbench.datasets import DatasetError, prepare
from specbench.engines.protocol import EngineCapabilities
from specbench.execution.conversations import run_conversations
from specbench.regression.gate_rules import GateConfigError, check_rule_categories, load_rules
from specbench.report.markdown import render_markdown
from specbench.report.plots import make_figures
from specbench.results.manifest import RunManifest
from specbench.results.records import CellRecord, RequestRecord, SpecCounters
from specbench.results.requests import (
    CellOutcome,
    CellRequest,
    PreparedPrompt,
    SamplingRequest,
    turn_prompt_id,
)

CATS = {"a0": "coding", "a1": "coding", "a2": "coding", "a3": "coding", "a4": "coding", "a5": "coding",
        "b0": "math", "b1": "math"}


def _spec(acc: int, drafts: int) -> SpecCounters:
    return counters(acc, drafts, per_position=[min(acc, drafts), max(0, acc - drafts), 0])


def _req(cell: str, pid: str, toks: list[int], lat: float, spec: SpecCounters | None = None, **kw: object
         ) -> RequestRecord:
    return request(cell, pid, tokens=toks, prompt_tokens=4, output_text=" ".join(map(str, toks)), latency_s=lat,
                   ttft_s=lat / 10, spec=spec, **kw)


def _run() -> tuple[list[Cell], list[CellRecord], list[RequestRecord]]:
    cells = [cell("baseline"), cell("eagle3", k=3), cell("dflash", k=3)]
    reqs: list[RequestRecord] = []
    for i, pid in enumerate(CATS):
        reqs.append(_req(cells[0].cell_id, pid, [1, 2, 3, 4, 5, 6], 1.0 + i / 10))
        reqs.append(_req(cells[1].cell_id, pid, [1, 2, 3, 4, 5, 6], 0.5 + i / 20, _spec(2 + i % 3, 3)))
        reqs.append(_req(cells[2].cell_id, pid, [1, 2, 3, 4, 5, 6] if i != 7 else [1, 2], 0.6, _spec(1 + i % 2, 4)))
    recs = [cell_record(c, engine_key="e", wall_time_s=5.0,
                       counters=None if c.k is None else sum((r.spec for r in reqs if r.cell_id == c.cell_id
                                                              and r.spec), SpecCounters(accepted_per_pos=[0, 0, 0])))
            for c in cells]
    return cells, recs, reqs


def test_every_dataset_kind_gives_each_prompt_a_category(tmp_path: Path) -> None:
    assert {p.meta["category"] for p in prepare(DatasetSpec(name="g", kind="gsm8k", limit=3), tmp_path)} == {"math"}
    assert {p.meta["category"] for p in prepare(DatasetSpec(name="h", kind="humaneval", limit=3), tmp_path)} == {"coding"}
    sb = prepare(DatasetSpec(name="s", kind="spec_bench"), tmp_path)
    assert len({p.meta["category"] for p in sb}) == 13 and all(p.later_turns is None for p in sb)
    both = prepare(DatasetSpec(name="s", kind="spec_bench", turns="all"), tmp_path)
    assert sum(1 for p in both if p.later_turns) == 80 and all(p.later_turns is not None for p in both)
    f = tmp_path / "x.jsonl"
    f.write_text('{"prompt": "a", "domain": "legal"}\n{"prompt": "b", "domain": "med"}\n')
    ps = prepare(DatasetSpec(name="j", kind="jsonl", path=str(f), category_field="domain"), tmp_path)
    assert [p.meta["category"] for p in ps] == ["legal", "med"]
    f.write_text('{"prompt": "a", "domain": "has space"}\n')
    with pytest.raises(DatasetError, match=r"x.jsonl:1: .domain. must be a category name"):
        prepare(DatasetSpec(name="j", kind="jsonl", path=str(f), category_field="domain"), tmp_path)


def test_chat_jsonl_first_live_recorded_and_bad_lines(tmp_path: Path) -> None:
    f = tmp_path / "chats.jsonl"
    conv = {"id": "c1", "category": "support", "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello there"}, {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "done"}]}
    f.write_text(json.dumps(conv) + "\n\n" + json.dumps({"messages": [{"role": "user", "content": "q"}]}) + "\n")
    first = prepare(DatasetSpec(name="c", kind="chat_jsonl", path=str(f)), tmp_path)
    assert [p.prompt_id for p in first] == ["c1", "c-1"] and first[0].later_turns is None
    assert first[0].messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    live = prepare(DatasetSpec(name="c", kind="chat_jsonl", path=str(f), replay="live"), tmp_path)
    assert live[0].later_turns == ["and?"] and live[1].later_turns == [] and live[0].meta == {"category": "support"}
    rec = prepare(DatasetSpec(name="c", kind="chat_jsonl", path=str(f), replay="recorded"), tmp_path)
    assert [(p.prompt_id, p.turn, p.reference) for p in rec] == [("c1.turn1", 1, "hello there"), ("c1.turn2", 2, "done")]
    assert rec[1].messages is not None and rec[1].messages[-2:] == [
        {"role": "assistant", "content": "hello there"}, {"role": "user", "content": "and?"}]
    for bad, why in [("{nope", "not JSON"), ('{"messages": [{"role": "assistant", "content": "x"}]}', "expected a user"),
                     ('{"messages": [{"role": "user"}]}', "messages.0.content"),
                     ('{"messages": [{"role": "bot", "content": "x"}]}', "messages.0.role")]:
        f.write_text(json.dumps(conv) + "\n" + bad + "\n")
        with pytest.raises(DatasetError, match=rf"chats.jsonl:2: .*{why}"):
            prepare(DatasetSpec(name="c", kind="chat_jsonl", path=str(f)), tmp_path)


def test_suite_rejects_turns_and_replay_where_they_do_not_apply(tmp_path: Path) -> None:
    (tmp_path / "c.jsonl").write_text('{"messages": [{"role": "user", "content": "q"}]}\n')
    head = "name: x\ntargets:\n  - name: t\n    model: tiny\n    methods:\n      - method: baseline\ndatasets:\n"
    cases = {
        "  - name: g\n    kind: gsm8k\n    turns: all\n": (10, "no conversation turns"),
        "  - name: c\n    kind: chat_jsonl\n    path: c.jsonl\n    replay: recroded\n": (11, "replay"),
        "  - name: s\n    kind: spec_bench\n    replay: live\n": (10, "applies to chat_jsonl"),
    }
    for body, (line, what) in cases.items():
        p = tmp_path / "s.yaml"
        p.write_text(head + body)
        with pytest.raises(SuiteError) as err:
            load_suite(p)
        assert any(m.startswith(f"{p}:{line}:") and what in m for m in err.value.messages), err.value.messages


def test_category_slices_recompute_by_hand_and_add_up() -> None:
    cells, recs, reqs = _run()
    groups = summarize_groups(cells, recs, reqs)
    greqs = {c.group_id: [r for r in reqs if r.cell_id == c.cell_id] for c in cells}
    cats = {("d", pid): cat for pid, cat in CATS.items()}
    slices = workload_slices(groups, greqs, cats)
    by_id = {s.group_id: s for s in slices}
    for g in groups:
        mine = [s for s in slices if s.group_id.startswith(g.group_id + "/category=")]
        assert sum(s.n_requests for s in mine) == g.n_requests == len(CATS)
    e3 = cells[1].group_id
    for cat in ("coding", "math"):
        rs = [r for r in greqs[e3] if CATS[r.prompt_id] == cat]
        s = by_id[f"{e3}/category={cat}"]
        tau = 1 + sum(r.spec.num_accepted_tokens for r in rs if r.spec) / sum(r.spec.num_drafts for r in rs if r.spec)
        assert s.tau is not None and s.tau.value is not None and abs(s.tau.value - tau) < 1e-12
        base = [r for r in greqs[cells[0].group_id] if CATS[r.prompt_id] == cat]
        sp = (sum(r.num_output_tokens for r in rs) / sum(r.latency_s or 0 for r in rs)) / (
            sum(r.num_output_tokens for r in base) / sum(r.latency_s or 0 for r in base))
        assert s.speedup is not None and s.speedup.value is not None and abs(s.speedup.value - sp) < 1e-12
        assert s.slice is not None and s.slice.category == cat and s.tpot_s is not None
    assert by_id[f"{cells[2].group_id}/category=math"].greedy_match.value == 0.5  # type: ignore[union-attr]
    matrix = category_matrix(groups, slices, greqs, cats, {"t": "eagle3"})
    dmath = next(c for c in matrix if c.method == "dflash" and c.category == "math")
    assert dmath.n_prompts == 2 < MIN_PROMPTS_FOR_INTERVAL and dmath.too_few and dmath.reference == "eagle3"
    dcode = next(c for c in matrix if c.method == "dflash" and c.category == "coding")
    assert not dcode.too_few and dcode.tau_ratio is not None and dcode.tau_ratio.ci_low is not None
    assert next(c for c in matrix if c.method == "eagle3").tau_ratio is None  # the reference itself


def _conv(cell: str, cid: str, turn: int, of: int, toks: list[int], error: str | None = None) -> RequestRecord:
    return _req(cell, turn_prompt_id(cid, turn), toks, 1.0, conversation_id=cid, turn=turn, conversation_turns=of,
                error=error)


def test_conversations_count_complete_once_and_later_turns_pair_on_identical_first_turns() -> None:
    torn = _conv("m", "c1", 1, 2, [9])  # a stop cut the conversation between its appends
    redone = [_conv("m", "c1", 1, 2, [1]), _conv("m", "c1", 2, 2, [2])]
    single = _req("m", "p", [5], 1.0)
    kept = complete_conversations([torn, single, *redone, _conv("m", "c2", 1, 2, [3])])
    assert kept == [single, *redone]
    assert complete_conversations([_conv("m", "c3", 1, 2, [1], error="timeout")])[0].error == "timeout"
    assert "turn" not in single.model_dump(mode="json") and redone[1].model_dump(mode="json")["turn"] == 2
    base = [_conv("b", "c1", 1, 2, [1]), _conv("b", "c1", 2, 2, [2]), _conv("b", "c2", 1, 2, [4]),
            _conv("b", "c2", 2, 2, [5])]
    method = [*redone, _conv("m", "c2", 1, 2, [3]), _conv("m", "c2", 2, 2, [5])]
    pairs = pair_turns(method, base)
    assert (pairs.identical, pairs.conversations) == (1, 2)
    assert {r.prompt_id for r in pairs.method} == {"c1", "c1.turn2", "c2"}
    assert paired_speedup(pairs.method, pairs.baseline).n == 3


class _EchoEngine:
    """An engine that answers each prompt with the number of messages it was sent (no model)."""

    capabilities = EngineCapabilities(kind="echo")

    def __init__(self) -> None:
        self.seen: list[list[dict[str, str]]] = []

    def run_cell(self, request: CellRequest, emit):  # noqa: ANN001, ANN201 - the Engine protocol's shape
        for p in request.prompts:
            self.seen.append(list(p.messages or []))
            emit(_req(request.cell.cell_id, p.prompt_id, [len(p.messages or [])], 0.1))
        return CellOutcome(wall_time_s=0.1, num_requests=len(request.prompts))


def test_turn_two_holds_the_engines_own_turn_one_reply_and_conversations_are_written_whole() -> None:
    c = cell("eagle3", k=3)
    prompts = [PreparedPrompt(prompt_id="a", messages=[{"role": "user", "content": "q1"}], later_turns=["q2", "q3"]),
               PreparedPrompt(prompt_id="b", messages=[{"role": "user", "content": "only"}], later_turns=[]),
               PreparedPrompt(prompt_id="done", messages=[{"role": "user", "content": "x"}], later_turns=["y"])]
    req = CellRequest(run_id="r", cell=c, prompts=prompts, sampling=SamplingRequest(temperature=0, max_tokens=4),
                      skip={("done", 0)})
    engine, out = _EchoEngine(), []
    outcome = run_conversations(engine, req, out.append)  # type: ignore[arg-type]
    assert outcome.num_requests == 4 and not any(m[0]["content"] == "x" for m in engine.seen)
    assert [(r.conversation_id, r.turn, r.conversation_turns) for r in out] == [
        ("b", 1, 1), ("a", 1, 3), ("a", 2, 3), ("a", 3, 3)]  # b ended first; a's turns together
    turn2 = next(m for m in engine.seen if len(m) == 3)
    assert turn2 == [{"role": "user", "content": "q1"}, {"role": "assistant", "content": out[1].output_text},
                     {"role": "user", "content": "q2"}]
    assert engine.seen[-1][3] == {"role": "assistant", "content": out[2].output_text}


def test_matrix_turns_and_heatmap_render_and_gate_categories_are_checked(tmp_path: Path) -> None:
    cells, recs, reqs = _run()
    groups = summarize_groups(cells, recs, reqs)
    greqs = {c.group_id: [r for r in reqs if r.cell_id == c.cell_id] for c in cells}
    cats = {("d", pid): cat for pid, cat in CATS.items()}
    slices = workload_slices(groups, greqs, cats)
    run = run_summary(groups + slices)
    run.extra.category_matrix = category_matrix(groups, slices, greqs, cats, {"t": "eagle3"})
    md = render_markdown(run)
    assert "## Categories" in md and "| Method·K | coding (n=6) | math (n=2) |" in md
    assert "(n=2: too few prompts for an interval)" in md
    assert md.count("t/eagle3/d/T0/b1/category=") == 0  # the results table lists whole groups only
    assert "category_heatmap" in make_figures(run)
    rules = tmp_path / "rules.yaml"
    rules.write_text("groups: ['*']\noverrides:\n  - groups: ['*/eagle3/*/category=codng']\n"
                     "    rules: {tau: {max_drop_pct: 1}}\n")
    with pytest.raises(GateConfigError, match=rf"{rules}:3: unknown category 'codng'.*coding, math"):
        check_rule_categories(load_rules(rules), rules, run)
    rules.write_text("overrides:\n  - groups: ['*/eagle3/*/category=coding', '*/category=m*']\n    rules: {}\n")
    check_rule_categories(load_rules(rules), rules, run)


def test_requests_frame_carries_category_and_turn() -> None:
    from specbench.frames import requests_frame

    c = cell("eagle3", k=3)
    manifest = RunManifest(run_id="r", suite_name="s", plan=Plan(suite_name="s", engines=[], cells=[c]))
    recs = [_conv(c.cell_id, "a0", 1, 2, [1]), _conv(c.cell_id, "a0", 2, 2, [2]), _req(c.cell_id, "b0", [3], 1.0)]
    df = requests_frame(manifest, recs, {("d", "a0"): "coding", ("d", "b0"): "math"})
    assert dict(zip(df["prompt_id"], df["category"], strict=True)) == {"a0": "coding", "a0.turn2": "coding", "b0": "math"}
    assert sorted(df["turn"].fillna(0).astype(int)) == [0, 1, 2]


def test_teacher_forcing_scores_a_later_turn_on_its_own_history() -> None:
    from specbench.execution.teacher_forcing import score_items_for
    from specbench.results.requests import PreparedPrompt

    c = cell("eagle3", k=3).model_copy(update={"temperature": 1.0})
    two = _conv(c.cell_id, "a0", 2, 2, [7])
    prompts = {("d", "a0"): PreparedPrompt(prompt_id="a0", messages=[{"role": "user", "content": "q1"}],
                                           later_turns=["q2"])}
    [item] = score_items_for([two], {c.cell_id: c}, prompts, 1.0, {(c.cell_id, "a0", 0, 0, 1): "my reply"})
    assert item.messages == [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "my reply"},
                             {"role": "user", "content": "q2"}]
