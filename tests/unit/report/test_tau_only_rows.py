"""Reference-engine rows are τ-only rows (issue 35): the reference simulator measures τ, never speed, so its
headline rows read "τ only", not "no data", in the terminal's tables, the compact summary and the report."""

from __future__ import annotations

import json

from rich.console import Console
from support.paths import FIXTURES

from specbench.cli import closing_tables
from specbench.report.compact import render_compact
from specbench.report.document import Refs
from specbench.report.markdown import md_blocks
from specbench.report.method_sections import headline_section
from specbench.report.terminal import TAU_ONLY, TAU_ONLY_NOTE, closing_rows, headline_rows
from specbench.results.manifest import RunManifest
from specbench.results.parts import HeadlineRow
from specbench.results.summary import RunSummary
from specbench.stats import Estimate

REF_TARGET = "tiny-ref"


def _summary() -> RunSummary:
    """summary_full.json plus a reference-engine target (its groups: τ, no timings), one timed headline row and
    one of the reference engine, and a timed row whose speed ratio is missing for another reason (n > 0)."""
    s = RunSummary.model_validate(json.loads((FIXTURES / "summary_full.json").read_text()))
    g = {x.group_id: x for x in s.groups}
    vllm_ref, vllm_m = g["llama-3.1-8b/eagle3/gsm8k/T0/b1"], g["llama-3.1-8b/p-eagle/gsm8k/T0/b1"]
    untimed = {}
    for x in (vllm_ref, vllm_m, g["llama-3.1-8b/dspark/gsm8k/T0/b1"]):
        y = x.model_copy(update={"target": REF_TARGET, "group_id": x.group_id.replace("llama-3.1-8b", REF_TARGET),
                                 "output_tps": None, "speedup": None, "latency_s": None, "equivalence": None})
        s.groups.append(y)
        untimed[x.method] = y

    def row(target, m, ref, speedup: Estimate, verdict) -> HeadlineRow:
        return HeadlineRow(
            target=target, dataset=m.dataset, temperature=m.temperature, batch_size=m.batch_size, method=m.method,
            method_kind=m.method_kind, method_group=m.group_id, method_k=m.k, reference="eagle3",
            reference_group=ref.group_id, reference_k=ref.k, n_prompts=8,
            tau_ratio=Estimate(value=1.07, ci_low=1.02, ci_high=1.12, n=8), speedup_ratio=speedup, verdict=verdict)

    s.headline += [
        row("llama-3.1-8b", vllm_m, vllm_ref, Estimate(value=1.21, ci_low=1.08, ci_high=1.35, n=8), "faster"),
        # timed, but the ratio could not be formed: a real "no data", not a τ-only row
        row("llama-3.1-8b", g["llama-3.1-8b/dspark/gsm8k/T0/b1"], vllm_ref, Estimate(value=None, n=8), "no data"),
        row(REF_TARGET, untimed["p-eagle"], untimed["eagle3"], Estimate(value=None, n=0), "no data"),
        row(REF_TARGET, untimed["dspark"], untimed["eagle3"], Estimate(value=None, n=0), "no data"),
    ]
    return s


def test_only_rows_without_timings_are_tau_only():
    s = _summary()
    assert [r.tau_only for r in s.headline] == [False, False, True, True]
    no_tau = s.headline[-1].model_copy(update={"tau_ratio": Estimate(value=None, n=0)})
    assert not no_tau.tau_only  # nothing compared at all: that is "no data"


def test_terminal_headline_and_closing_tables_mark_tau_only_rows():
    s = _summary()
    verdicts = {t: [r[-1] for r in rows] for t, rows in headline_rows(s).items()}
    assert verdicts[REF_TARGET] == [TAU_ONLY, TAU_ONLY]
    assert verdicts["llama-3.1-8b"] == ["–", "faster"]  # dspark (no data), p-eagle

    speedups = {(t, r[1]): r[4] for t, rows in closing_rows(s).items() for r in rows}
    assert speedups[(REF_TARGET, "p-eagle K3")] == TAU_ONLY
    assert speedups[("llama-3.1-8b", "baseline")] == "–"  # timed, no speedup over itself

    con = Console(width=100, record=True, color_system=None)
    for t in closing_tables(s):
        con.print(t)
    lines = [line.rstrip() for line in con.export_text().splitlines()]
    assert max(len(line) for line in lines) <= 100
    starts = [i for i, line in enumerate(lines) if line.startswith("target ")] + [len(lines)]
    tables = {lines[a]: " ".join(lines[a:b]) for a, b in zip(starts, starts[1:], strict=False)}
    ref_table = tables[f"target {REF_TARGET}: each method against the reference"]
    assert "measures τ, not speed" in " ".join(ref_table.split())
    assert "measures τ" not in tables["target llama-3.1-8b: each method against the reference"]  # only where it applies
    assert "no data" not in " ".join(lines)


def test_compact_summary_counts_and_names_tau_only_rows():
    s = _summary()
    manifest = RunManifest.load(json.loads((FIXTURES / "manifest_full.json").read_text()))
    text = render_compact(s, manifest)
    head = text[text.index("## Against"):text.index("## Lossless")]
    assert "1 faster, 1 no data, 2 τ only." in head and TAU_ONLY_NOTE in head
    assert sum(line.startswith(f"| {REF_TARGET} ") and line.rstrip().endswith("| τ only |")
               for line in head.splitlines()) == 2


def test_report_headline_marks_tau_only_rows():
    s = _summary()
    text = "\n".join(md_blocks([headline_section(s, Refs())]))
    assert TAU_ONLY_NOTE in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert sum("| τ only |" in line for line in lines) == 2
    assert sum("| no data |" in line for line in lines) == 1
