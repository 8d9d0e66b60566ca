"""The report's Input length section, from hand-built groups sliced by input length: every
method at every length with τ, acceptance by position, step time, TPOT and speedup with their
intervals, and the ratios over EAGLE-3 at that length from the headline rows."""

from __future__ import annotations

from support.factories import cell, group, run_summary

from specbench.config.plan import Cell
from specbench.report.markdown import render_markdown
from specbench.results.parts import HeadlineRow
from specbench.results.slices import Slice
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate


def _e(v: float, half: float = 0.1, n: int = 4) -> Estimate:
    return Estimate(value=v, ci_low=v - half, ci_high=v + half, n=n, method="bootstrap")


def _cell(method: str, n: int) -> Cell:
    return cell(method, "x", 3, target="tiny", dataset="context", cell_id="", engine_key="e", input_tokens=n)


def _group(method: str, n: int, tau: float) -> GroupSummary:
    kind = "baseline" if method == "baseline" else method
    spec = kind != "baseline"
    return group(
        method, kind, 3 if spec else None, target="tiny", dataset="context", group_id=_cell(method, n).group_id,
        n_requests=4,
        slice=Slice(input_tokens=n), tau=_e(tau) if spec else None,
        per_position=[_e(0.8), _e(0.5), _e(0.25)] if spec else [], step_time_s=_e(0.004, 0.001),
        tpot_s=_e(0.002, 0.0005), speedup=_e(1.2) if spec else None,
    )


def _summary() -> RunSummary:
    groups = [_group(m, n, tau) for m, taus in (("eagle3", (2.9, 1.6)), ("p-eagle", (2.1, 1.4)), ("baseline", (0, 0)))
              for n, tau in zip((64, 768), taus, strict=True)]
    headline = [HeadlineRow(target="tiny", dataset="context", temperature=0.0, batch_size=1, method="p-eagle",
                            method_kind="p-eagle", method_group=_cell("p-eagle", n).group_id, method_k=3,
                            reference="eagle3", reference_group=_cell("eagle3", n).group_id, reference_k=3,
                            n_prompts=4, tau_ratio=_e(r), speedup_ratio=_e(r + 0.1), verdict="not distinguishable")
                for n, r in ((64, 0.72), (768, 0.88))]
    return run_summary(groups, headline=headline)


def test_the_cell_of_a_length_is_the_groups_input_tokens_slice():
    assert _cell("eagle3", 256).group_id == "tiny/eagle3/context/T0/b1/input_tokens=256"
    assert _cell("eagle3", 256).model_copy(update={"input_tokens": None}).group_id == "tiny/eagle3/context/T0/b1"


def test_every_method_at_every_length_with_intervals_and_the_ratio_to_eagle3():
    text = render_markdown(_summary())
    section = text[text.index("## Input length"):]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert [r.split(" | ")[:2] for r in rows] == [["| eagle3", "64"], ["| eagle3", "768"], ["| p-eagle", "64"],
                                                      ["| p-eagle", "768"], ["| baseline", "64"],
                                                      ["| baseline", "768"]]
    eagle_768 = rows[1]
    assert "1.60 [1.50, 1.70]" in eagle_768 and "0.80 · 0.50 · 0.25" in eagle_768
    assert "4.00 [3.00, 5.00]" in eagle_768 and "2.00 [1.50, 2.50]" in eagle_768 and "1.20× [1.10, 1.30]" in eagle_768
    p_768 = rows[3]
    assert "0.88× [0.78, 0.98]" in p_768 and "0.98× [0.88, 1.08]" in p_768  # τ ratio, speedup ratio over EAGLE-3
    assert "(ratios over eagle3)" in section


def test_a_run_without_lengths_has_no_section():
    s = _summary()
    s.groups = [g.model_copy(update={"slice": None}) for g in s.groups]
    assert "## Input length" not in render_markdown(s)


def test_tables_name_a_groups_input_length_beside_its_dataset():
    from specbench.report.terminal import closing_rows, headline_rows
    from specbench.results.fmt import dataset_label

    assert dataset_label("code", "tiny/eagle3/code/T0/b1/input_tokens=768") == "code 768 tok"
    assert dataset_label("code", "tiny/eagle3/code/T0/b1") == "code"
    s = _summary()
    assert [r[0] for r in closing_rows(s)["tiny"]][:2] == ["context 64 tok", "context 768 tok"]
    assert [r[0] for r in headline_rows(s)["tiny"]] == ["context 64 tok 0·b1", "context 768 tok 0·b1"]
