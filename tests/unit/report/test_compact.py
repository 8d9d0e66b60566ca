"""The compact summary (specbench.report.compact) fits a GitHub comment for every suite's largest plausible run,
leads with the headline and keeps it whole; its golden is tests/golden/summary_full.md (regenerate after an
intended change with SPECBENCH_UPDATE_GOLDEN=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.factories import stored_manifest, stored_summary
from support.paths import GOLDEN, SUITES

from specbench import api
from specbench.config.plan import expand
from specbench.regression.gate import GateCheck, GateResult
from specbench.report.compact import COMMENT_LIMIT, render_compact
from specbench.report.markdown import render_markdown
from specbench.results.manifest import RunManifest
from specbench.results.parts import CounterCheck, HeadlineRow
from specbench.results.summary import CellStatusLine, GroupSummary, RunSummary
from specbench.stats import Estimate

SUITE_FILES = sorted(SUITES.glob("*.yaml"))
CHECKS = ("accepted <= draft tokens", "per-position sum = accepted", "1 <= tau <= K+1")


def _est(v: float, n: int = 480) -> Estimate:
    return Estimate(value=v, ci_low=v * 0.93, ci_high=v * 1.08, n=n, method="bootstrap")


def largest_plausible_run(suite_path: Path) -> RunSummary:
    """Every group of the suite's plan, measured, with a verdict on every lossless test that is not
    'equivalent' (each listed by name), every counter check failed, and a headline row for every method
    against the reference at every (target, dataset, T, load): more than any real run of the suite carries."""
    suite = api.load_suite(suite_path)
    plan = expand(suite)
    first: dict[str, object] = {}
    for c in plan.cells:
        first.setdefault(c.group_id, c)
    groups, checks = [], []
    for c in first.values():
        spec = c.method_kind != "baseline"
        tests = ["greedy"] if c.temperature == 0 else ["sampled"]
        groups.append(GroupSummary(
            group_id=c.group_id, target=c.target, method=c.method, method_kind=c.method_kind, k=c.k,
            family=c.family, dataset=c.dataset, temperature=c.temperature, batch_size=c.batch_size,
            request_rate=c.request_rate, status="ok", n_requests=480, output_tokens=480 * 256,
            cells=[CellStatusLine(cell_id=f"{c.group_id}/r0", status="ok")],
            tau=_est(3.1) if spec else None, speedup=_est(1.9) if spec else None, output_tps=_est(123.4),
            equivalence={t: {"verdict": "not shown equivalent", "reason": "x" * 300, "n": 480} for t in tests}
            if spec else None,
        ))
        checks += [CounterCheck(group_id=c.group_id, check=name, ok=False) for name in CHECKS] if spec else []
    reference = getattr(suite, "compare_to", None) or "eagle3"
    headline = []
    for key in dict.fromkeys(c.baseline_group_key for c in first.values()):
        at = [g for g in groups if (g.target, g.dataset, g.temperature, g.batch_size, g.request_rate) == key]
        best: dict[str, GroupSummary] = {}
        for g in at:
            fam = g.family or g.method
            if g.method_kind != "baseline" and (fam not in best or (g.k or 0) > (best[fam].k or 0)):
                best[fam] = g
        ref = best.pop(reference, None)
        if ref is None:
            continue
        for fam, g in best.items():
            headline.append(HeadlineRow(
                target=g.target, dataset=g.dataset, temperature=g.temperature, batch_size=g.batch_size,
                request_rate=g.request_rate, method=fam, method_kind=g.method_kind, method_group=g.group_id,
                method_k=g.k, reference=reference, reference_group=ref.group_id, reference_k=ref.k, n_prompts=480,
                tau_ratio=_est(1.234), speedup_ratio=_est(1.111), method_speedup=_est(2.5),
                reference_speedup=_est(2.25), verdict="not distinguishable",
            ))
    return RunSummary(run_id=f"{suite.name}-largest", suite_name=suite.name, groups=groups, checks=checks,
                      headline=headline)


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


@pytest.mark.parametrize("suite", SUITE_FILES, ids=[p.stem for p in SUITE_FILES])
def test_every_suite_fits_a_comment_with_the_headline_whole(suite: Path) -> None:
    summary = largest_plausible_run(suite)
    manifest = RunManifest(run_id=summary.run_id, suite_name=summary.suite_name, created_at="2026-12-01T00:00:00Z")
    text = render_compact(summary, manifest, full_report="reports/run.md")
    assert len(text) < COMMENT_LIMIT, (suite.name, len(text))
    print(f"{suite.stem}: {len(summary.groups)} groups, {len(summary.headline)} headline rows: compact summary "
          f"{len(text):,} characters (the full report {len(render_markdown(summary, manifest)):,})")
    if summary.headline:
        head = _section(text, "Against")
        assert text.index("## Against") < text.index("## Lossless") < text.index("## Checks")
        assert "more rows" not in head
        assert head.count("| not distinguishable |") == len(summary.headline)
    assert "`reports/run.md`" in text


def test_a_small_budget_cuts_the_alarms_first_and_says_how_many_rows_are_left_out() -> None:
    summary = largest_plausible_run(SUITES / "cpu-tour.yaml")
    whole = render_compact(summary)
    text = render_compact(summary, budget=12_000)
    assert len(text) <= 12_000 < len(whole)
    assert "more rows in the full report" in _section(text, "Checks")
    assert _section(text, "Against") == _section(whole, "Against")
    n_failed = sum(1 for c in summary.checks if not c.ok)
    shown = _section(text, "Checks").count("| 1 <= tau <= K+1 |") + _section(text, "Checks").count("= accepted |") \
        + _section(text, "Checks").count("<= draft tokens |")
    cut = int(_section(text, "Checks").split("… ")[1].split(" more rows")[0])
    assert shown + cut == n_failed


def test_compact_summary_golden() -> None:
    """summary_full.json (lossless verdicts, a failed check, cells not run) with two headline rows and a
    failing gate, built by hand."""
    summary, manifest = stored_summary(), stored_manifest()
    g = {x.group_id: x for x in summary.groups}
    ref = g["llama-3.1-8b/eagle3/gsm8k/T0/b1"]
    for gid, speedup, verdict in (("llama-3.1-8b/p-eagle/gsm8k/T0/b1", 1.21, "faster"),
                                  ("llama-3.1-8b/dspark/gsm8k/T0/b1", 1.02, "not distinguishable")):
        m = g[gid]
        summary.headline.append(HeadlineRow(
            target=m.target, dataset=m.dataset, temperature=m.temperature, batch_size=m.batch_size, method=m.method,
            method_kind=m.method_kind, method_group=gid, method_k=m.k, reference="eagle3", reference_group=ref.group_id,
            reference_k=ref.k, n_prompts=80, tau_ratio=Estimate(value=1.07, ci_low=1.02, ci_high=1.12, n=80),
            speedup_ratio=Estimate(value=speedup, ci_low=speedup - 0.13, ci_high=speedup + 0.14, n=80),
            verdict=verdict))
    gate = GateResult(exit_code=1, status="regression", baseline="history:5", confidence=0.95, checks=[
        GateCheck(group_id="llama-3.1-8b/eagle3/gsm8k/T0/b1", metric="tau", rule="drop > 5%", passed=False,
                  message="τ 2.91 → 2.62 (−10.0% [−12.1, −7.9]), over the 5% allowed"),
        GateCheck(group_id="llama-3.1-8b/eagle3/gsm8k/T0/b8", metric="tau", rule="drop > 5%", passed=True,
                  message="τ 2.90 → 2.89"),
    ])
    text = render_compact(summary, manifest, full_report="reports/20260501T120000Z-full.md", gate=gate)
    golden = GOLDEN / "summary_full.md"
    if os.environ.get("SPECBENCH_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs; rerun with SPECBENCH_UPDATE_GOLDEN=1 and review the diff"
    assert text.index("## Gate") < text.index("## Against eagle3") < text.index("## Lossless")
