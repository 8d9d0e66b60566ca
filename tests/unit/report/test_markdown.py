"""Markdown report: golden files from hand-built fixtures, plus targeted checks.

Regenerate the golden files after an intended change with
``SPECBENCH_UPDATE_GOLDEN=1 pytest tests/unit/report/test_markdown.py`` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.factories import stored_manifest, stored_summary
from support.paths import FIXTURES, GOLDEN

from specbench.report.markdown import render_markdown
from specbench.results.manifest import EngineEntry, EnginePatchNote, RunManifest
from specbench.results.parts import Equivalence
from specbench.results.summary import RunSummary
from specbench.stats import Estimate


def load(name: str) -> tuple[RunSummary, RunManifest]:
    return stored_summary(name), stored_manifest(name)


@pytest.mark.parametrize("name", ["full", "minimal"])
def test_golden(name: str) -> None:
    text = render_markdown(*load(name))
    path = GOLDEN / f"report_{name}.md"
    if os.environ.get("SPECBENCH_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; rerun with SPECBENCH_UPDATE_GOLDEN=1 and review the diff"


def test_deterministic_and_free_of_render_time() -> None:
    summary, manifest = load("full")
    a = render_markdown(summary, manifest)
    assert a == render_markdown(summary.model_copy(deep=True), manifest.model_copy(deep=True))
    assert "2026-05-01T12:00:00Z" in a  # the run's own date comes from the manifest
    import datetime

    assert datetime.date.today().isoformat() not in a


def test_full_report_has_every_part() -> None:
    text = render_markdown(*load("full"))
    for needle in [
        "gsm8k-gpu", "20260501T120000Z-full", "0123456789ab", "vLLM 0.32.0", "1× NVIDIA H200",
        "## Results", "### llama-3.1-8b · gsm8k", "2.85 [2.79, 2.91]", "0.81 / 0.62 / 0.42",
        "1.92× [1.85, 1.99] (n=64)", "τ 3.02 (ref. 1)", "ref. 1: EAGLE-3 paper", "## Accuracy", "Δ exact_match",
        "## Equivalence", "divergent", "not shown equivalent", "## Serving", "| c=1 | c=8 | c=32 |",
        "## Reference cross-check", "FLAG: differs", "## Checks", "1 of 24 checks FAILED",
        "## Skipped and failed cells", "model runner V2", "<details>", "CUDA out of memory",
        "2 of 128 requests returned an error",
    ]:
        assert needle in text, needle
    # A pipe in a reason or reference must not break a table row.
    assert "P-EAGLE model card \\| gsm8k" not in text.split("## Published values")[1]
    for line in text.splitlines():
        if line.startswith("| ") and "model card" in line:
            assert "card \\| gsm8k" in line
    # The log tail contains ``` so the fence must be longer.
    assert "````text" in text


def test_minimal_report_omits_optional_sections() -> None:
    text = render_markdown(*load("minimal"))
    for absent in ["## Accuracy", "## Equivalence", "## Serving", "## Reference cross-check", "Published"]:
        assert absent not in text
    assert "No checks recorded." in text and "None: every cell ran." in text
    assert "| ngram | 2 | 1 | 1.70 |" in text  # no interval with n=1, the n column says 1


def test_speedup_rows_are_pivoted_by_load() -> None:
    serving_metrics = pytest.importorskip("specbench.analysis.serving_metrics")
    summary, manifest = load("minimal")
    est = Estimate(value=1.5, ci_low=1.4, ci_high=1.6, n=32, method="bootstrap")
    speedups = [{**serving_metrics.Speedup(method="ngram", concurrency=c, metric=m, estimate=est, n_method=32,
                                           n_baseline=32).model_dump(mode="json"), "target": "tiny", "dataset": "jsonl"}
                for c in (1, 4) for m in ("tpot", "throughput")]
    summary.extra = {"serving": speedups}
    text = render_markdown(summary, manifest)
    assert "## Serving" in text and "| tiny · jsonl | ngram | tpot | 1.50× [1.40, 1.60] (n=32) |" in text
    from specbench.report.build import build_report
    from specbench.report.document import Table

    serving = next(b for b in build_report(summary, manifest, markdown=False) if getattr(b, "title", "") == "Serving")
    table = next(b for b in serving.blocks if isinstance(b, Table))
    assert table.headers == ["Where", "Method", "Metric", "c=1", "c=4"]
    assert table.rows[0] == ["tiny · jsonl", "ngram", "tpot", "1.50× [1.40, 1.60] (n=32)", "1.50× [1.40, 1.60] (n=32)"]


def test_generic_serving_and_nested_equivalence() -> None:
    summary, manifest = load("minimal")
    g = summary.groups[1]
    g.equivalence = Equivalence.model_validate({
        "greedy": {"verdict": "equivalent", "reason": "1 of 1 identical", "n": 1},
        "distribution": {"verdict": "not shown equivalent", "reason": "too few tokens", "n_tokens": 32,
                         "pvalue": 0.41, "detectable_tv": 0.52},
    })
    # a schema-1 summary with untyped extras: its loader keeps what has a typed shape
    summary = RunSummary.load({**summary.model_dump(mode="json"), "schema_version": 1, "extra": {
        "serving": {"note": "single load", "max_concurrency": 4},
        "cross_check": [{"method": "ngram", "dataset": "jsonl", "target": "tiny vs tiny-ref", "agree": False,
                         "reference": {"value": 1.7, "ci_low": 1.6, "ci_high": 1.8},
                         "vllm": {"value": 2.2, "ci_low": 2.1, "ci_high": 2.3}}]}})
    text = render_markdown(summary, manifest)
    assert "| distribution | not shown equivalent | too few tokens; n_tokens=32, pvalue=0.41" in text
    assert "## Serving" not in text
    assert "FLAG: differs" in text


def test_failed_check_and_missing_values_do_not_crash() -> None:
    summary, manifest = load("minimal")
    g = summary.groups[1]
    g.tau = None
    g.speedup = None
    g.per_position = []
    g.accuracy_delta = {"exact_match": Estimate(value=-0.0001, ci_low=-0.02, ci_high=0.02, n=10)}
    summary.checks = [{"group_id": g.group_id, "check": "1 <= tau <= K+1", "ok": False}]
    text = render_markdown(summary, manifest)
    assert "1 of 1 checks FAILED" in text
    assert "+0.0 pp [-2.0, +2.0] (n=10)" in text  # no "-0.0"
    assert "Speedup and greedy match need an ok baseline" in text


# --------------------------------------------------------------------------
# HTML: the same tables, one self-contained file


def _tables(blocks: list) -> list:
    from specbench.report.document import Details, Section, Table

    out = []
    for b in blocks:
        if isinstance(b, Table):
            out.append(b)
        elif isinstance(b, (Section, Details)):
            out += _tables(b.blocks)
    return out


def test_html_is_self_contained_and_has_every_table() -> None:
    import html as htmllib
    import re

    from specbench.report.build import build_report
    from specbench.report.html import render_html

    summary, manifest = load("full")
    page = render_html(summary, manifest, figures={"tau": b"\x89PNG fake", "per_position": b"\x89PNG fake"})
    assert page.count('src="data:image/png;base64,') == 2
    assert not re.search(r"(src|href)=\"(?!data:|#)", page), "external reference"
    assert "<script" not in page and "<link" not in page and "@import" not in page and "url(" not in page
    text = htmllib.unescape(page)
    tables = _tables(build_report(summary, manifest, markdown=False))
    assert page.count("<table>") == len(tables)
    for t in tables:
        assert "".join(f"<th>{h}</th>" for h in t.headers) in text
    for needle in ["τ 3.02 (ref. 1)", "model runner V2", "CUDA out of memory", "ref. 1: EAGLE-3 paper",
                   "num_speculative_tokens: 3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "NVIDIA H200",
                   'class="bad">divergent', 'class="warn">not shown equivalent', "P-EAGLE model card | gsm8k"]:
        assert needle in text, needle


def test_html_escapes_untrusted_text() -> None:
    from specbench.report.html import render_html

    summary, manifest = load("minimal")
    summary.groups[1].status = "failed"
    summary.groups[1].cells[0].status = "failed"
    summary.groups[1].cells[0].reason = "<img src=x onerror=alert(1)>"
    summary.groups[1].cells[0].engine_log_tail = "</pre><script>alert(1)</script>"
    page = render_html(summary, manifest, figures={})
    assert "<script>" not in page and "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_html_renders_inline_markdown_of_paragraphs() -> None:
    """The engine-patch and draft-attention lines: bold and code as HTML, never literal ** or backticks."""
    from specbench.report.html import render_html
    from specbench.report.markdown import render_markdown

    summary, manifest = load("minimal")
    manifest.engine_patches = {"tiny": [EnginePatchNote(name="vllm-cpu-expand-float", summary="x < y & `z`")]}
    manifest.engines = [EngineEntry(key="tiny/eagle3", draft_attention={"mismatch": True, "why": "causal <b>"})]
    page = render_html(summary, manifest, figures={})
    body = page.split("<main>", 1)[1].split('id="configuration"', 1)[0]
    assert "**" not in body and "`" not in body
    assert "<p><strong>Engine patch on tiny:</strong> <code>vllm-cpu-expand-float</code>: x &lt; y &amp; <code>z</code>.</p>" in body
    assert "<strong>Draft served ≠ trained on tiny/eagle3:</strong> causal &lt;b&gt;." in body
    assert "**Engine patch on tiny:** `vllm-cpu-expand-float`" in render_markdown(summary, manifest)


def test_write_reports_default_and_explicit_out_dir(tmp_path: Path) -> None:
    import shutil

    from specbench.report.html import write_reports

    run_dir = tmp_path / "results" / "cpu-smoke" / "cpu-smoke-1"
    run_dir.mkdir(parents=True)
    shutil.copy(FIXTURES / "summary_minimal.json", run_dir / "summary.json")
    paths = write_reports(run_dir)
    assert paths == {"markdown": tmp_path / "reports" / "cpu-smoke-1.md", "html": tmp_path / "reports" / "cpu-smoke-1.html",
                     "summary": tmp_path / "reports" / "cpu-smoke-1.summary.md"}
    assert "`cpu-smoke-1.md / cpu-smoke-1.html`" in paths["summary"].read_text()  # it says where the full report is
    assert paths["markdown"].read_text().startswith("# specbench · cpu-smoke")  # no manifest: still renders
    assert paths["html"].read_text().startswith("<!DOCTYPE html>")
    other = write_reports(run_dir, tmp_path / "elsewhere")
    assert other["html"].parent == tmp_path / "elsewhere" and other["html"].is_file()
    with pytest.raises(FileNotFoundError, match="summary.json"):
        write_reports(tmp_path / "results" / "cpu-smoke" / "missing")


def test_greedy_identity_table_shows_counts_tolerance_and_gaps() -> None:
    summary, manifest = load("minimal")
    g = summary.groups[1]
    g.equivalence = Equivalence.model_validate({"greedy": {
        "verdict": "divergent", "reason": "1 of 4 outputs diverge beyond numerical noise", "n": 4,
        "n_identical": 2, "n_near_tie": 1, "n_divergent": 1, "n_unverifiable": 0, "tie_tolerance": 0.25,
        "tolerance_from": "bfloat16", "near_tie_gaps": [0.0625], "divergent_gaps": [2.9],
    }})
    text = render_markdown(summary, manifest)
    row = next(line for line in text.splitlines() if "| 0.25 (bfloat16) |" in line)
    assert f"| {g.method} |" in row and "| 4 | 2 | 1 | 1 | 0 |" in row
    assert "near-tie ≤ 0.0625; divergent ≥ 2.9" in row
