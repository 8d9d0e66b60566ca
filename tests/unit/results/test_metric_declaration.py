"""A metric declared once, in the catalogue, reaches the report, the gate's rules, the history and the frames."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.factories import cell, cell_record, counters, request
from support.paths import FIXTURES

from specbench import stats
from specbench.results import metric_catalog as catalog
from specbench.results.records import RequestRecord, SpecCounters
from specbench.stats import Estimate

NAME = "made_up_tokens"


def made_up(counters: SpecCounters | None, requests: Sequence[RequestRecord]) -> Estimate | None:
    """Mean output tokens per request, with drafts counted double: a metric nobody reports."""
    ok = [r for r in requests if r.error is None]
    if not ok:
        return None
    extra = 2 * (counters.num_drafts if counters is not None else 0) / len(ok)
    return stats.mean_ci([r.num_output_tokens + extra for r in ok])


DECLARATION = catalog.MetricSpec(
    NAME, "made-up tokens", "tokens", "higher", 1, "mean output tokens + 2 drafts per request; n: requests",
    gate=True, history=True, compute=made_up, table="Made-up tokens", max_drop_pct=1)


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> catalog.MetricSpec:
    monkeypatch.setattr(catalog, "CATALOG", (*catalog.CATALOG, DECLARATION))
    return DECLARATION


def _run(run_id: str, tokens: int):  # noqa: ANN202 - a RunSummary
    from specbench.analysis.metrics import summarize

    cells = [cell("baseline"), cell("eagle3", k=3)]
    spec = counters(3, 2, per_position=[2, 1, 0])
    reqs = [request(c.cell_id, f"p{i}", tokens=[1] * (tokens + i % 3), run_id=run_id, latency_s=1.0 + i / 10,
                    spec=spec if c.k else None)
            for c in cells for i in range(8)]
    records = [cell_record(c.cell_id, run_id=run_id, wall_time_s=9.0,
                           counters=None if c.k is None else sum((r.spec for r in reqs if r.cell_id == c.cell_id),
                                                                 SpecCounters()))
               for c in cells]
    return summarize(run_id, "s", cells, records, reqs), cells[1].group_id


def test_a_metric_declared_once_reaches_report_gate_history_and_frames(
        declared: catalog.MetricSpec, tmp_path: Path) -> None:
    from specbench.frames import groups_frame
    from specbench.regression.gate import evaluate_gate
    from specbench.regression.gate_rules import load_rules
    from specbench.regression.history import History
    from specbench.report.markdown import render_markdown
    from specbench.results.manifest import RunManifest

    base, gid = _run("20260501T120000Z-a", 20)
    g = base.group(gid)
    assert g is not None
    value = g.metrics[NAME].value  # computed by the analysis from the declaration
    assert value == pytest.approx(167 / 8 + 2 * 16 / 8)  # 20, 21, 22, 20, 21, 22, 20, 21 tokens; 16 drafts
    # the report's results table: the declared header, the value with the declared digits
    manifest = json.loads((FIXTURES / "manifest_minimal.json").read_text())
    lines = render_markdown(base, RunManifest.load(manifest)).splitlines()
    table = next(line for line in lines if "Made-up tokens" in line)
    row = next(line for line in lines if line.startswith("| eagle3"))
    col = [c.strip() for c in table.split("|")].index("Made-up tokens")
    assert row.split("|")[col].strip().startswith(f"{value:.1f} [")
    # the gate: its default rule (max drop 1 %) and a rule file that names it
    new, _ = _run("20260502T120000Z-b", 16)
    checks = [c for c in evaluate_gate(new, base).checks if c.metric == NAME]
    assert {c.group_id: c.passed for c in checks} == {gid: False, gid.replace("eagle3", "baseline"): False}
    (tmp_path / "rules.yaml").write_text(f"rules: {{{NAME}: {{max_drop_pct: 50}}}}\n")
    checks = [c for c in evaluate_gate(new, base, load_rules(tmp_path / "rules.yaml")).checks if c.metric == NAME]
    assert {(c.passed, c.rule) for c in checks} == {(True, f"{NAME}: max drop 50%")} and len(checks) == 2
    # the history database
    with History(f"sqlite:///{tmp_path / 'h.sqlite'}") as hist:
        hist.add(RunManifest.load({**manifest, "run_id": base.run_id}), base)
        series = hist.series(hist.runs())
    assert [p.estimate.value for p in series[(gid, NAME)]] == [pytest.approx(value)]
    # specbench.load()'s groups frame
    frame = groups_frame(base).set_index("group_id")
    assert frame.loc[gid, NAME] == pytest.approx(value) and frame.loc[gid, f"{NAME}_n"] == 8


def test_without_the_declaration_nothing_knows_the_metric(tmp_path: Path) -> None:
    """The same run without the entry: no value, no column, no rule accepted (what the test above adds)."""
    from specbench.frames import groups_frame
    from specbench.regression.gate_rules import GateConfigError, load_rules

    base, gid = _run("20260501T120000Z-a", 20)
    assert NAME not in base.group(gid).metrics and NAME not in groups_frame(base).columns  # type: ignore[union-attr]
    (tmp_path / "rules.yaml").write_text(f"rules: {{{NAME}: {{max_drop_pct: 50}}}}\n")
    with pytest.raises(GateConfigError, match=NAME):
        load_rules(tmp_path / "rules.yaml")
