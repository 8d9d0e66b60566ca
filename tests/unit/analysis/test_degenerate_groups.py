"""Degenerate outputs per group (issue 34): the share, the numbers without them, the marks, the gate
ceiling and the frames, on hand-built records of a run whose outputs loop or do not.

Each group has ten requests of 64 tokens at K=3. A looping output (one token repeated) accepts every
draft but the last step's third, 16 steps; a varied output accepts one draft per step, 32 steps. The
baseline produces the same outputs; its latency is 6.4 s per request, the method's 1.0 s on a loop and
3.2 s + 0.1 s per prompt index otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import FIXTURES

from specbench import stats
from specbench.analysis.method_comparison import headline_ratios, k_sweeps
from specbench.analysis.metrics import (
    latest_cell_records,
    requests_by_group,
    summarize_groups,
    unique_requests,
)
from specbench.config.plan import Cell
from specbench.results import degeneracy
from specbench.results.parts import CategoryCell
from specbench.results.records import CellRecord, RequestRecord, SpecCounters, StepTrace
from specbench.results.summary import RunSummary

N, TOKENS = 10, 64


def _loop(i: int) -> list[int]:
    return [7] * TOKENS


def _varied(i: int) -> list[int]:
    return list(range(1000 * (i + 1), 1000 * (i + 1) + TOKENS))


LOOP_SPEC = SpecCounters(num_drafts=16, num_draft_tokens=48, num_accepted_tokens=47, accepted_per_pos=[16, 16, 15])
LOOP_STEPS = StepTrace(drafted=[3] * 16, accepted=[3] * 15 + [2], complete=True, source="vllm")
VARIED_SPEC = SpecCounters(num_drafts=32, num_draft_tokens=96, num_accepted_tokens=31, accepted_per_pos=[31, 0, 0])
VARIED_STEPS = StepTrace(drafted=[3] * 32, accepted=[1] * 31 + [0], complete=True, source="vllm")


def _cells(methods: tuple[tuple[str, int | None, str | None], ...]) -> list[Cell]:
    return [Cell(cell_id=f"t/{m}/d/T0/b1/r0", engine_key=f"t--{m}", target="t", method=m,
                 method_kind="baseline" if k is None else "eagle3", k=k, family=fam, dataset="d", temperature=0.0,
                 batch_size=1, repeat=0) for m, k, fam in methods]


def _records(cells: list[Cell], loops: int) -> tuple[list[CellRecord], list[RequestRecord]]:
    """Requests 0..loops-1 of every cell loop; the others are varied."""
    reqs = []
    for c in cells:
        for i in range(N):
            looped = i < loops
            spec, trace = (LOOP_SPEC, LOOP_STEPS) if looped else (VARIED_SPEC, VARIED_STEPS)
            latency = 6.4 if c.k is None else 1.0 if looped else 3.2 + 0.1 * i
            reqs.append(RequestRecord(
                run_id="r", cell_id=c.cell_id, engine_key=c.engine_key, prompt_id=f"p{i}", prompt_tokens=5,
                output_token_ids=(_loop if looped else _varied)(i), output_text="", latency_s=latency,
                spec=None if c.k is None else spec, steps=None if c.k is None else trace))
    cell_records = [CellRecord(run_id="r", cell_id=c.cell_id, engine_key=c.engine_key, status="ok", wall_time_s=60.0,
                               counters=None if c.k is None else sum((r.spec for r in reqs
                                                                      if r.cell_id == c.cell_id and r.spec),
                                                                     SpecCounters()))
                    for c in cells]
    return cell_records, reqs


METHODS = (("baseline", None, None), ("eagle3", 3, None), ("dflash", 3, None))


def _run(loops: int, methods: tuple = METHODS) -> RunSummary:
    cells = _cells(methods)
    cell_records, reqs = _records(cells, loops)
    groups = summarize_groups(cells, cell_records, reqs)
    greqs = requests_by_group(cells, latest_cell_records(cell_records), unique_requests(reqs))
    return RunSummary(run_id=f"20260501T12000{loops}Z-x", suite_name="s", groups=groups,
                      headline=headline_ratios(groups, greqs, {"t": "eagle3"}), k_sweeps=k_sweeps(groups, greqs))


@pytest.fixture(scope="module")
def three() -> RunSummary:
    return _run(3)


@pytest.fixture(scope="module")
def one() -> RunSummary:
    return _run(1)


def _g(s: RunSummary, method: str):  # noqa: ANN202 - a GroupSummary
    g = next(g for g in s.groups if g.method == method)
    assert g.status == "ok"
    return g


def test_the_share_is_declared_and_has_a_wilson_interval(three: RunSummary) -> None:
    for method in ("baseline", "eagle3"):
        share = _g(three, method).metrics["degenerate_share"]
        assert share == stats.wilson(3, N)
        assert share.value == pytest.approx(0.3) and share.n == N
        assert _g(three, method).metrics["short_share"].value == 0.0


def test_three_of_ten_looping_outputs_are_marked_one_is_not(three: RunSummary, one: RunSummary) -> None:
    assert three.rests_on_loops("t/eagle3/d/T0/b1") and three.rests_on_loops("t/baseline/d/T0/b1")
    assert not one.rests_on_loops("t/eagle3/d/T0/b1") and not one.rests_on_loops("t/baseline/d/T0/b1")
    assert _g(one, "eagle3").metrics["degenerate_share"].value == pytest.approx(0.1)


def test_tau_tokens_per_step_and_speedup_without_the_loops_recompute_by_hand(three: RunSummary) -> None:
    g = _g(three, "eagle3")
    nd = g.non_degenerate
    assert nd is not None and nd.tau is not None and nd.tokens_per_step is not None and nd.speedup is not None
    # pooled: 3 loops (47 accepted of 16 drafts) and 7 varied (31 of 32)
    assert g.tau is not None and g.tau.value == pytest.approx(1 + (3 * 47 + 7 * 31) / (3 * 16 + 7 * 32))
    assert nd.tau.value == pytest.approx(1 + 31 / 32) and nd.tau.n == 7
    assert g.tokens_per_step is not None and g.tokens_per_step.value == pytest.approx(10 * 63 / (3 * 16 + 7 * 32))
    assert nd.tokens_per_step.value == pytest.approx(63 / 32) and nd.tokens_per_step.n == 7
    varied = range(3, N)
    method_rate = 7 * TOKENS / sum(3.2 + 0.1 * i for i in varied)
    assert nd.speedup.value == pytest.approx(method_rate / (TOKENS / 6.4)) and nd.speedup.n == 7
    assert g.speedup is not None and g.speedup.n == N and g.speedup.value != pytest.approx(nd.speedup.value)


def test_without_loops_the_numbers_are_the_pooled_ones(one: RunSummary) -> None:
    clean = _run(0)
    g = _g(clean, "eagle3")
    assert g.metrics["degenerate_share"].value == 0.0
    assert g.non_degenerate is not None
    assert (g.non_degenerate.tau, g.non_degenerate.tokens_per_step, g.non_degenerate.speedup) == (
        g.tau, g.tokens_per_step, g.speedup)


def test_the_headline_and_terminal_mark_a_verdict_resting_on_loops(three: RunSummary, one: RunSummary) -> None:
    from specbench.report.markdown import render_markdown
    from specbench.report.terminal import closing_note, closing_rows, headline_note, headline_rows

    row = headline_rows(three)["t"][0]
    assert row[-1].endswith(degeneracy.MARK) and degeneracy.MARK_NOTE in headline_note(three, "t")
    tau_cells = [r[3] for r in closing_rows(three)["t"] if r[3] != "–"]
    assert tau_cells and all(c.endswith(degeneracy.MARK) for c in tau_cells)
    assert closing_note(three, "t") == degeneracy.MARK_NOTE
    text = render_markdown(three)
    assert "## Outputs behind the numbers" in text and degeneracy.MARK_NOTE in text
    headline_line = next(line for line in text.splitlines() if line.startswith("| dflash | 3 |"))
    assert headline_line.split("|")[7].strip().endswith(degeneracy.MARK)
    assert "30.0% [10.8, 60.3]" in text  # the share, in the results table and the section
    from specbench.report.compact import render_compact

    assert degeneracy.MARK_NOTE in render_compact(three) and degeneracy.MARK not in render_compact(one)
    # one loop in ten: shown, never marked
    assert not any(degeneracy.MARK in c for r in headline_rows(one)["t"] for c in r)
    assert closing_note(one, "t") is None and degeneracy.MARK_NOTE not in headline_note(one, "t")
    text = render_markdown(one)
    assert degeneracy.MARK not in text and "10.0% [1.8, 40.4]" in text


def test_k_sweeps_category_matrix_and_input_length_tables_mark_loops(three: RunSummary) -> None:
    from specbench.report.input_length import input_length_section
    from specbench.report.markdown import md_blocks
    from specbench.report.method_sections import k_sweep_section
    from specbench.report.workloads import category_section

    swept = _run(3, (("baseline", None, None), ("eagle3-k2", 2, "eagle3"), ("eagle3-k3", 3, "eagle3")))
    assert swept.k_sweeps
    text = "\n".join(md_blocks([k_sweep_section(swept)]))  # type: ignore[list-item]
    assert degeneracy.MARK_NOTE in text
    rows = [line for line in text.splitlines() if line.startswith("| t | d | 0 | eagle3 |")]
    points, best = [r for r in rows if r.count("|") == 12], [r for r in rows if r.count("|") == 8]
    assert len(points) == 2 and len(best) == 1
    assert all(degeneracy.MARK in r.split("|")[8] and degeneracy.MARK in r.split("|")[9] for r in points)  # τ, speedup
    assert best[0].split("|")[6].strip().endswith(degeneracy.MARK)  # the best K rests on them too
    g = _g(three, "eagle3")
    cell = CategoryCell(target="t", dataset="d", temperature=0.0, batch_size=1, method="eagle3", method_kind="eagle3",
                        k=3, group_id=g.group_id, category="math", n_prompts=10, tau=g.tau)
    matrix = three.model_copy(update={"extra": three.extra.model_copy(update={"category_matrix": [cell]})})
    assert degeneracy.MARK in "\n".join(md_blocks([category_section(matrix)]))  # type: ignore[list-item]
    clean = _run(0)
    cell0 = cell.model_copy(update={"group_id": _g(clean, "eagle3").group_id})
    clean_matrix = clean.model_copy(update={"extra": clean.extra.model_copy(update={"category_matrix": [cell0]})})
    assert degeneracy.MARK not in "\n".join(md_blocks([category_section(clean_matrix)]))  # type: ignore[list-item]
    from specbench.results.slices import Slice

    sliced = three.model_copy(update={"groups": [x.model_copy(update={"slice": Slice(input_tokens=512)})
                                                 for x in three.groups]})
    text = "\n".join(md_blocks([input_length_section(sliced)]))  # type: ignore[list-item]
    assert degeneracy.MARK_NOTE in text
    assert all(degeneracy.MARK in line for line in text.splitlines() if line.startswith(("| eagle3", "| dflash")))


def test_a_gate_ceiling_on_the_share_fails_three_in_ten_and_passes_one(three: RunSummary, one: RunSummary,
                                                                      tmp_path: Path) -> None:
    from specbench.regression.gate import evaluate_gate
    from specbench.regression.gate_rules import LimitRule, load_rules

    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text("rules: {degenerate_share: {max: 0.2}}\n")
    rules = load_rules(rules_file)
    assert rules.rules.rule("degenerate_share") == LimitRule(max=0.2)
    failing = evaluate_gate(three, one, rules)
    checks = [c for c in failing.checks if c.metric == "degenerate_share"]
    assert len(checks) == 3 and not any(c.passed for c in checks) and failing.exit_code == 1
    assert all(c.rule == "degenerate_share: at most 0.2" for c in checks)
    passing = evaluate_gate(one, three, rules)
    checks = [c for c in passing.checks if c.metric == "degenerate_share"]
    assert len(checks) == 3 and all(c.passed for c in checks)
    assert not any(c.metric == "degenerate_share" for c in evaluate_gate(three, one).checks)  # no default rule
    rules_file.write_text("rules: {degenerate_share: {max: 0.2, max_drop_pct: 3}}\n")
    from specbench.regression.gate_rules import GateConfigError

    with pytest.raises(GateConfigError, match="max_drop_pct"):
        load_rules(rules_file)


def test_frames_carry_the_request_column_and_the_group_share(three: RunSummary) -> None:
    from specbench.frames import groups_frame, requests_frame
    from specbench.results.manifest import RunManifest

    cells = _cells(METHODS)
    _, reqs = _records(cells, 3)
    manifest = RunManifest.load(json.loads((FIXTURES / "manifest_minimal.json").read_text()))
    frame = requests_frame(manifest, reqs)
    assert frame["degenerate"].tolist() == [i < 3 for _ in cells for i in range(N)]
    assert set(frame["output_class"]) == {"degenerate", "varied"}
    groups = groups_frame(three).set_index("group_id")
    assert groups.loc["t/eagle3/d/T0/b1", "degenerate_share"] == pytest.approx(0.3)
    assert groups.loc["t/eagle3/d/T0/b1", "degenerate_share_n"] == N
    assert groups.loc["t/eagle3/d/T0/b1", "non_degenerate.tau_n"] == 7


def test_summaries_before_the_measure_load_and_are_never_marked() -> None:
    for name in ("summary_v1_full.json", "summary_v1_minimal.json"):
        old = RunSummary.load(json.loads((FIXTURES / "schema" / name).read_text()))
        assert not old.rests_on_loops(*(g.group_id for g in old.groups))
        assert all(g.non_degenerate is None and "non_degenerate" not in g.model_dump() for g in old.groups)
    summary = _run(3)
    assert RunSummary.load(json.loads(summary.model_dump_json())) == summary
