"""Markdown report: golden files from hand-built fixtures, plus targeted checks.

Regenerate the golden files after an intended change with
``SPECBENCH_UPDATE_GOLDEN=1 pytest tests/unit/test_report_markdown.py`` and
review the diff.
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from specbench.report.markdown import render_markdown
from specbench.stats import Estimate
from specbench.summary import RunSummary

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"


def load(name: str) -> tuple[RunSummary, dict]:
    summary = RunSummary.model_validate_json((FIXTURES / f"summary_{name}.json").read_text())
    manifest = json.loads((FIXTURES / f"manifest_{name}.json").read_text())
    return summary, manifest


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
    assert a == render_markdown(summary.model_copy(deep=True), dict(manifest))
    assert "2026-05-01T12:00:00Z" in a  # the run's own date comes from the manifest
    import datetime

    assert datetime.date.today().isoformat() not in a


def test_full_report_has_every_part() -> None:
    text = render_markdown(*load("full"))
    for needle in [
        "gsm8k-gpu", "20260501T120000Z-full", "0123456789ab", "vLLM 0.32.0", "1× NVIDIA H200",
        "## Results", "### llama-3.1-8b · gsm8k", "2.85 [2.79, 2.91]", "0.81 / 0.62 / 0.42",
        "1.92× [1.85, 1.99] (n=64)", "τ 3.02 (ref. 1)", "ref. 1: EAGLE-3 paper", "## Accuracy", "Δ exact_match",
        "## Equivalence", "divergent", "not shown equivalent", "## Serving", "c=32",
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


def test_serving_renderer_from_serving_metrics_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    summary, manifest = load("full")
    fake = types.ModuleType("specbench.serving_metrics")
    fake.render_serving_markdown = lambda serving: f"SERVING TABLE ({len(serving)} rows)"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "specbench.serving_metrics", fake)
    text = render_markdown(summary, manifest)
    assert "SERVING TABLE (6 rows)" in text and "c=32" not in text


def test_generic_serving_and_nested_equivalence() -> None:
    summary, manifest = load("minimal")
    g = summary.groups[1]
    g.equivalence = {
        "greedy": {"verdict": "equivalent", "reason": "1 of 1 identical", "n": 1},
        "distribution": {"verdict": "not shown equivalent", "reason": "too few tokens", "n_tokens": 32,
                         "pvalue": 0.41, "detectable_tv": 0.52},
    }
    summary.extra = {"serving": {"note": "single load", "max_concurrency": 4},
                     "cross_check": [{"method": "ngram", "reference_tau": {"value": 1.7, "ci_low": 1.6, "ci_high": 1.8},
                                      "vllm_tau": {"value": 2.2, "ci_low": 2.1, "ci_high": 2.3}}]}
    text = render_markdown(summary, manifest)
    assert "| distribution | not shown equivalent | too few tokens; n_tokens=32, pvalue=0.41" in text
    assert "| max_concurrency | 4 |" in text
    assert "FLAG: intervals do not overlap" in text


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
