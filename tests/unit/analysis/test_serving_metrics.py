"""Serving summaries from hand-built records."""

from __future__ import annotations

import numpy as np
import pytest
from support.factories import cell, cell_record, request, run_summary

from specbench.analysis.serving_metrics import (
    SLO,
    Rate,
    dist,
    group_records,
    meets_slo,
    request_tpot,
    speedup,
    speedups_vs_concurrency,
    speedups_vs_load,
    summarize_cell,
)
from specbench.config.plan import Cell
from specbench.results.records import RequestRecord, SpecCounters


def rec(
    pid: str,
    *,
    n: int = 5,
    ttft: float = 0.1,
    tpot: float = 0.01,
    cell: str = "c",
    error: str | None = None,
    prompt_tokens: int = 10,
    spec: SpecCounters | None = None,
) -> RequestRecord:
    itl = [tpot] * (n - 1)
    return request(cell, pid, tokens=n, prompt_tokens=prompt_tokens, output_text="x" * n, ttft_s=ttft, itl_s=itl,
                   latency_s=ttft + sum(itl), error=error, spec=spec)


def test_request_tpot() -> None:
    assert request_tpot(rec("a", n=5, ttft=0.1, tpot=0.02)) == pytest.approx(0.02)
    assert request_tpot(rec("a", n=1)) is None


def test_dist_percentiles() -> None:
    d = dist([float(i) for i in range(1, 101)] + [None])  # type: ignore[list-item]
    assert d.n == 100 and d.mean == pytest.approx(50.5)
    assert d.p50 == pytest.approx(50.5) and d.p90 == pytest.approx(90.1) and d.p99 == pytest.approx(99.01)
    assert dist([]).n == 0 and dist([]).p50 is None


def test_summarize_cell_counts_throughput_goodput_and_errors() -> None:
    spec = SpecCounters(num_drafts=2, num_draft_tokens=6, num_accepted_tokens=4, accepted_per_pos=[2, 1, 1])
    records = [
        rec("a", n=5, ttft=0.1, tpot=0.01, spec=spec),
        rec("b", n=11, ttft=0.3, tpot=0.02),
        rec("c", n=2, ttft=0.05, tpot=0.05, error="timeout: no complete response"),
        rec("d", n=0, error="http: 500 boom"),
    ]
    counters = SpecCounters(
        num_drafts=10, num_draft_tokens=30, num_accepted_tokens=25, accepted_per_pos=[10, 9, 6]
    )
    s = summarize_cell(records, 2.0, slo=SLO(ttft_s=0.2, tpot_s=0.015), counters=counters, concurrency=4)
    assert s.num_requests == 4 and s.num_ok == 2
    assert s.errors == {"timeout": 1, "http": 1}
    assert s.output_tokens == 16 and s.prompt_tokens == 20
    assert s.output_throughput == pytest.approx(8.0) and s.total_throughput == pytest.approx(18.0)
    assert s.request_throughput == pytest.approx(1.0)
    assert s.ttft.n == 2 and s.ttft.p50 == pytest.approx(0.2)
    assert s.tpot.mean == pytest.approx(0.015)
    assert s.itl.n == 4 + 10  # every token gap of successful requests
    assert s.goodput == pytest.approx(0.5) and s.goodput_fraction == pytest.approx(0.25)  # only "a"
    assert s.tau_pooled == pytest.approx(3.5) and s.tau_mean_per_request == pytest.approx(3.0)


def test_meets_slo() -> None:
    assert meets_slo(rec("a", ttft=0.1, tpot=0.01), SLO(ttft_s=0.1, tpot_s=0.0101, latency_s=1.0))
    assert not meets_slo(rec("a", ttft=0.11), SLO(ttft_s=0.1))
    assert not meets_slo(rec("a", n=50, tpot=0.03), SLO(latency_s=1.0))
    assert meets_slo(rec("a", n=1), SLO(tpot_s=0.001))  # one token: no TPOT to violate
    assert not meets_slo(rec("a", error="http: 500"), SLO())


def test_speedup_point_and_interval() -> None:
    rng = np.random.default_rng(0)
    base = [rec(f"b{i}", n=20, tpot=float(t)) for i, t in enumerate(rng.normal(0.02, 0.002, 60))]
    meth = [rec(f"m{i}", n=20, tpot=float(t)) for i, t in enumerate(rng.normal(0.01, 0.001, 60))]
    est = speedup(base, meth, "tpot")

    def pooled(recs: list[RequestRecord]) -> float:  # Σ (latency − TTFT) / Σ (tokens − 1)
        return sum(r.latency_s - r.ttft_s for r in recs) / sum(r.num_output_tokens - 1 for r in recs)

    assert est.value == pytest.approx(pooled(base) / pooled(meth))
    # every request has 20 tokens: the pooled ratio is the ratio of the mean TPOTs
    assert est.value == pytest.approx(np.mean([request_tpot(r) for r in base]) / np.mean([request_tpot(r) for r in meth]))
    assert est.ci_low is not None and est.ci_high is not None
    assert est.ci_low < est.value < est.ci_high and 1.8 < est.value < 2.2
    assert est.ci_high - est.ci_low < 0.3
    # Seeded: same records, same interval.
    assert speedup(base, meth, "tpot") == est
    thr = speedup(base, meth, "throughput")
    # Same token counts: the per-stream rate ratio is the latency ratio (TTFT included).
    assert thr.value == pytest.approx(sum(r.latency_s for r in base) / sum(r.latency_s for r in meth))
    # Failed requests are ignored; empty arms give no estimate.
    assert speedup(base, [rec("x", error="http: 500")], "tpot").value is None


def test_speedup_vs_concurrency_table() -> None:
    cells = [cell(m, batch_size=bs, repeat=r) for m in ("baseline", "eagle3") for bs in (1, 4) for r in (0, 1)]
    records = []
    for c in cells:
        slow = 2.0 if c.method == "baseline" else 1.0
        slow *= 1.0 if c.batch_size == 1 else 1.5
        records += [rec(f"p{i}", n=10, tpot=0.01 * slow * (1 + 0.01 * i), cell=c.cell_id) for i in range(8)]
    groups = group_records(records, cells)
    assert list(groups) == [("t", "d", 0.0)]
    g = groups[("t", "d", 0.0)]
    assert len(g[("eagle3", 4)]) == 16  # repeats pooled
    sp = speedups_vs_concurrency(g, resamples=200)
    assert [(s.method, s.concurrency, s.metric) for s in sp] == [
        ("eagle3", 1, "tpot"),
        ("eagle3", 1, "throughput"),
        ("eagle3", 4, "tpot"),
        ("eagle3", 4, "throughput"),
    ]
    tp = [s for s in sp if s.metric == "tpot"]
    assert all(s.estimate.value == pytest.approx(2.0) for s in tp)
    assert all(min(s.n_method, s.n_baseline) == 16 for s in sp)
    text = _report_of(sp)
    assert "| Where | Method | Metric | c=1 | c=4 |" in text
    assert "| t · d | eagle3 | tpot | 2.00× [" in text


def test_speedup_skips_concurrency_without_baseline() -> None:
    g = {("eagle3", 8): [rec("a")], ("baseline", 1): [rec("b")], ("eagle3", 1): [rec("c")]}
    sp = speedups_vs_concurrency(g, metrics=("tpot",))
    assert [(s.concurrency, s.estimate.method) for s in sp] == [(1, "none")]


# ---------------------------------------------------------------------------
# request-rate (Poisson) loads


def _rate_cell(method: str, rate: float, repeat: int = 0, cap: int = 0) -> Cell:
    return cell(method, k=None if method == "baseline" else 3, batch_size=cap, repeat=repeat, request_rate=rate)


def _records_for(cells: list[Cell], slow: dict[tuple[str, object], float]) -> list[RequestRecord]:
    out = []
    for c in cells:
        load = c.request_rate if c.request_rate is not None else c.batch_size
        f = slow[(c.method, load)]
        out += [rec(f"p{i}", n=10, tpot=0.01 * f * (1 + 0.01 * i), cell=c.cell_id) for i in range(8)]
    return out


def test_rate_and_concurrency_loads_are_grouped_apart() -> None:
    # Concurrency 4 and rate 4 req/s are different loads even though the numbers agree.
    cells = [cell(m, batch_size=4) for m in ("baseline", "eagle3")]
    cells += [_rate_cell(m, 4.0) for m in ("baseline", "eagle3")]
    records = []
    for c in cells:
        f = {"baseline": 3.0 if c.request_rate is not None else 2.0, "eagle3": 1.0}[c.method]
        records += [rec(f"p{i}", n=10, tpot=0.01 * f * (1 + 0.01 * i), cell=c.cell_id) for i in range(8)]
    g = group_records(records, cells)[("t", "d", 0.0)]
    assert set(g) == {("baseline", 4), ("eagle3", 4), ("baseline", Rate(4.0)), ("eagle3", Rate(4.0))}
    sp = speedups_vs_load(g, resamples=200)
    assert [(s.method, s.concurrency, s.request_rate, s.metric) for s in sp] == [
        ("eagle3", 4, None, "tpot"),
        ("eagle3", 4, None, "throughput"),
        ("eagle3", None, 4.0, "tpot"),
        ("eagle3", None, 4.0, "throughput"),
    ]
    tpot = {s.load: s.estimate.value for s in sp if s.metric == "tpot"}
    # Each method is compared with the baseline at its own load: 2× at concurrency 4, 3× at 4 req/s.
    assert tpot[4] == pytest.approx(2.0) and tpot[Rate(4.0)] == pytest.approx(3.0)
    assert speedups_vs_concurrency is speedups_vs_load  # the old name still works


def test_speedup_vs_request_rate_table() -> None:
    cells = [_rate_cell(m, r, rep) for m in ("baseline", "eagle3") for r in (0.5, 8.0) for rep in (0, 1)]
    records = _records_for(cells, {("baseline", 0.5): 1.5, ("eagle3", 0.5): 1.0,
                                   ("baseline", 8.0): 2.4, ("eagle3", 8.0): 2.0})
    g = group_records(records, cells)[("t", "d", 0.0)]
    assert len(g[("eagle3", Rate(8.0))]) == 16  # repeats pooled
    sp = speedups_vs_load(g, resamples=200)
    assert [s.request_rate for s in sp] == [0.5, 0.5, 8.0, 8.0] and all(s.concurrency is None for s in sp)
    est = {(s.request_rate, s.metric): s.estimate for s in sp}
    assert est[(0.5, "tpot")].value == pytest.approx(1.5) and est[(8.0, "tpot")].value == pytest.approx(1.2)
    lo, hi = est[(8.0, "tpot")].ci_low, est[(8.0, "tpot")].ci_high
    assert lo is not None and hi is not None and lo < 1.2 < hi
    assert all(min(s.n_method, s.n_baseline) == 16 for s in sp)
    text = _report_of(sp)
    assert "| Where | Method | Metric | 0.5 req/s | 8 req/s |" in text
    assert "| t · d | eagle3 | tpot | 1.50× [" in text and "(n=16) | 1.20× [" in text
    # With both kinds of load, each gets its own table, concurrency first.
    conc = speedups_vs_load({("baseline", 2): [rec("a", tpot=0.02)], ("eagle3", 2): [rec("a", tpot=0.01)]})
    both = _report_of([*conc, *sp])
    assert "| Where | Method | Metric | c=2 |" in both and "| Where | Method | Metric | 0.5 req/s | 8 req/s |" in both
    assert both.index("| c=2 |") < both.index("| 0.5 req/s |")


def _report_of(speedups: list) -> str:
    """The report's serving section of speedup rows (the analysis stores them with their target and dataset)."""
    from specbench.report.markdown import render_markdown
    from specbench.results.parts import ServingSpeedupRow

    rows = [ServingSpeedupRow(target="t", dataset="d", **s.model_dump()) for s in speedups]
    return render_markdown(run_summary(extra={"serving": rows}))


def test_rate_rows_reach_the_summary_and_the_report(tmp_path) -> None:
    """summarize_serving on hand-built records: cell rows carry the rate and their stored ratios, the report shows
    a rate table."""
    from specbench.analysis.metrics import latest_cell_records, unique_requests
    from specbench.analysis.pipeline import summarize_serving
    from specbench.report.build import build_report
    from specbench.report.document import Table
    from specbench.report.markdown import render_markdown
    from specbench.results.parts import ServingCellRow, ServingSpeedupRow

    cells = [_rate_cell(m, r, cap=4) for m in ("baseline", "eagle3") for r in (1.0, 8.0)]
    cells += [cell(m, batch_size=2) for m in ("baseline", "eagle3")]
    slow = {("baseline", 1.0): 2.0, ("eagle3", 1.0): 1.0, ("baseline", 8.0): 3.0, ("eagle3", 8.0): 2.0,
            ("baseline", 2): 1.0, ("eagle3", 2): 1.0}
    records = _records_for(cells, slow)
    cell_recs = [cell_record(c, wall_time_s=2.0) for c in cells]
    rows = summarize_serving({"t"}, cells, unique_requests(records), latest_cell_records(cell_recs))
    cell_rows = {r.cell_id: r for r in rows if isinstance(r, ServingCellRow)}
    r8 = cell_rows["t/eagle3/d/T0/rate8/r0"]
    assert r8.request_rate == 8.0 and r8.concurrency is None and r8.max_concurrency == 4
    assert cell_rows["t/eagle3/d/T0/b2/r0"].concurrency == 2
    assert cell_rows["t/eagle3/d/T0/b2/r0"].request_rate is None
    sp = [r for r in rows if isinstance(r, ServingSpeedupRow)]
    assert {(r.concurrency, r.request_rate) for r in sp} == {(2, None), (None, 1.0), (None, 8.0)}

    summary = run_summary(extra={"serving": [r.model_dump() for r in rows]})
    text = render_markdown(summary)
    assert "Speedup over the baseline by concurrency (95% intervals):" in text
    assert "Speedup over the baseline by request rate (Poisson arrivals) (95% intervals):" in text
    serving = next(b for b in build_report(summary) if getattr(b, "title", "") == "Serving")
    readable, *tables = [b for b in serving.blocks if isinstance(b, Table)]
    h = readable.headers
    assert h[:5] == ["Target", "Dataset", "T", "Load", "Method"] and "TPOT p50 (ms)" in h and "ITL p99 (ms)" in h
    row = next(r for r in readable.rows if r[3] == "8 req/s" and r[4] == "eagle3")
    base = next(r for r in readable.rows if r[3] == "8 req/s" and r[4] == "baseline")

    def pooled_tpot(cell_id: str) -> float:  # Σ (latency − TTFT) / Σ (tokens − 1) over the cell's requests
        mine = [r for r in records if r.cell_id == cell_id]
        return sum(r.latency_s - r.ttft_s for r in mine) / sum(r.num_output_tokens - 1 for r in mine)

    want = pooled_tpot("t/baseline/d/T0/rate8/r0") / pooled_tpot("t/eagle3/d/T0/rate8/r0")
    assert r8.vs_baseline is not None and r8.vs_baseline.cell_id == "t/baseline/d/T0/rate8/r0"
    assert r8.vs_baseline.tpot_ratio == pytest.approx(want) and r8.vs_baseline.throughput_ratio == pytest.approx(1.0)
    assert r8.vs_reference is None and cell_rows["t/baseline/d/T0/rate8/r0"].vs_baseline is None
    assert row[-1] == f"{want:.2f}× / 1.00×" and base[-1] == "–"  # the stored ratios, as stored
    assert [t.headers for t in tables] == [["Where", "Method", "Metric", "c=2"],
                                           ["Where", "Method", "Metric", "1 req/s", "8 req/s"]]
    tpot_row = next(r for r in tables[1].rows if r[2] == "tpot")
    assert tpot_row[:3] == ["t · d", "eagle3", "tpot"]
    assert tpot_row[3].startswith("2.00× [") and tpot_row[4].startswith("1.50× [")


def test_a_server_cell_is_compared_with_the_reference_at_the_same_k_else_its_fastest() -> None:
    """The serving table's reference: the reference method at the same K when it ran it, else its cell with the
    highest aggregate tok/s; the reference's own cell has none."""
    from specbench.analysis.serving_metrics import compare_cells, comparison_cells

    cells = [cell("baseline", batch_size=2), cell("dflash-k3", "dflash", 3, batch_size=2, family="dflash"),
             cell("dflash-k5", "dflash", 5, batch_size=2, family="dflash"),
             cell("eagle3-k3", "eagle3", 3, batch_size=2, family="eagle3"),
             cell("eagle3-k4", "eagle3", 4, batch_size=2, family="eagle3")]
    tput = {c.cell_id: float(i) for i, c in enumerate(cells)}  # eagle3-k4 is the fastest eagle3
    against = comparison_cells(cells, {"t": "eagle3"}, tput)
    by = {c.method: c for c in cells}
    assert against[by["dflash-k3"].cell_id] == (by["baseline"], by["eagle3-k3"])
    assert against[by["dflash-k5"].cell_id] == (by["baseline"], by["eagle3-k4"])
    assert against[by["eagle3-k3"].cell_id] == (by["baseline"], None)
    assert against[by["baseline"].cell_id] == (None, by["eagle3-k4"])
    fast = [rec(f"p{i}", n=11, tpot=0.01, cell=by["dflash-k3"].cell_id) for i in range(4)]
    slow = [rec(f"p{i}", n=11, tpot=0.03, cell=by["eagle3-k3"].cell_id) for i in range(4)]
    c = compare_cells(summarize_cell(fast, 1.0, cell_id="x", method="dflash-k3"), fast,
                      summarize_cell(slow, 2.0, cell_id="y", method="eagle3-k3"), slow)
    assert (c.cell_id, c.method) == ("y", "eagle3-k3")
    assert c.tpot_ratio == pytest.approx(3.0) and c.throughput_ratio == pytest.approx(2.0)
