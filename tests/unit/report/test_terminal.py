"""The closing table of `specbench run`: whole cells within 100 columns, piped or not."""

from __future__ import annotations

import json
import re

from rich.console import Console
from support.paths import FIXTURES

from specbench.cli import closing_tables
from specbench.report.terminal import closing_rows, group_verdict
from specbench.results.summary import RunSummary


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
    assert group_verdict(div) == "divergent"


def _with_headline() -> RunSummary:
    """summary_full.json with every method against EAGLE-3 at each (dataset, load) it measured, built by hand."""
    from specbench.results.parts import HeadlineRow
    from specbench.stats import Estimate

    s = _summary("summary_full.json")
    by = {(g.dataset, g.batch_size, g.method): g for g in s.groups}
    for (dataset, bs, method), g in by.items():
        ref = by.get((dataset, bs, "eagle3"))
        if ref is None or method in ("eagle3", "baseline"):
            continue
        v = 1.0 + 0.1 * len(method) / (1 + bs)
        s.headline.append(HeadlineRow(
            target=g.target, dataset=dataset, temperature=g.temperature, batch_size=bs, method=method,
            method_kind=g.method_kind, method_group=g.group_id, method_k=g.k, reference="eagle3",
            reference_group=ref.group_id, reference_k=ref.k, n_prompts=80,
            tau_ratio=Estimate(value=v, ci_low=v - 0.05, ci_high=v + 0.05, n=80),
            speedup_ratio=Estimate(value=v, ci_low=v - 0.3, ci_high=v + 0.3, n=80),
            verdict="faster" if v - 0.3 > 1 else "not distinguishable"))
    return s


def test_the_closing_lines_lead_with_each_method_against_eagle3_at_100_columns():
    from specbench.report.terminal import headline_rows

    s = _with_headline()
    con = Console(width=100, record=True, color_system=None)
    for t in closing_tables(s):
        con.print(t)
    lines = con.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    titles = [line.strip() for line in lines if line.strip().startswith("target ")]
    assert titles[0] == "target llama-3.1-8b: each method against the reference"
    assert titles[1] == "target llama-3.1-8b"  # then the per-group table
    first_group_table = lines.index(next(x for x in lines if x.strip() == "target llama-3.1-8b"))
    answer = lines[:first_group_table]
    assert len(s.headline) == 12
    seen, where, ref = [], "", ""
    for line in answer:
        if "×" not in line:
            continue
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 6:
            where, ref = cells[0], cells[1]
            cells = cells[2:]
        seen.append((where, ref, *cells))
    # one line per method and (dataset, load): its best K, both ratios whole, the verdict; where and the
    # reference at its best K once per (dataset, load)
    assert seen == [(f"{r.dataset} 0·b{r.batch_size}", f"eagle3 K{r.reference_k}", f"{r.method} K{r.method_k}",
                     r.speedup_ratio.fmt().replace(" [", "× ["), r.tau_ratio.fmt().replace(" [", "× ["),
                     "faster" if r.verdict == "faster" else "n.d.")
                    for r in sorted(s.headline, key=lambda r: (r.dataset, r.batch_size, r.method))]
    assert sum("eagle3 K3" in x for x in answer) == 4
    rows = headline_rows(s)["llama-3.1-8b"]
    assert [r[0] for r in rows if r[0]] == ["gsm8k 0·b1", "gsm8k 0·b8", "humaneval 0·b1", "humaneval 0·b8"]
