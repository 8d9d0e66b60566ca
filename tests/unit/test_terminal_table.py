"""The closing table of `specbench run`: whole cells within 100 columns, piped or not."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from specbench.cli import closing_tables
from specbench.report.terminal import closing_rows, verdict
from specbench.results.summary import RunSummary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _summary(name: str) -> RunSummary:
    return RunSummary.model_validate(json.loads((FIXTURES / name).read_text()))


def test_the_table_fits_100_columns_and_keeps_every_interval_on_one_line():
    s = _summary("summary_full.json")
    con = Console(width=100, record=True, color_system=None)
    for t in closing_tables(s):
        con.print(t)
    lines = con.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    body = "\n".join(lines)
    assert {f"target {g.target}" for g in s.groups} <= {line.strip() for line in lines}
    for g in s.groups:
        if g.tau and g.tau.value is not None:
            assert g.tau.fmt() in body  # not wrapped over several lines
    assert "…" not in body.replace("[95% CI]", "")  # nothing in the fixture needed clipping


def test_rows_name_k_load_and_a_verdict():
    s = _summary("summary_full.json")
    rows = {(target, *r[:3]): r for target, rs in closing_rows(s).items() for r in rs}
    g = next(g for g in s.groups if g.method == "eagle3" and g.dataset == "gsm8k" and g.batch_size == 1)
    row = rows[(g.target, g.dataset, f"eagle3 K{g.k}", "0·b1")]
    assert row[3] == g.tau.fmt() and row[5] == "equivalent"
    div = next(g for g in s.groups if g.equivalence and g.equivalence.greedy
               and g.equivalence.greedy.verdict == "divergent")
    assert verdict(div) == "divergent"
