"""The report golden of a small recorded run: ``analyze`` rebuilds the summary from the committed raw
records (tests/fixtures/recorded: baseline and ngram on the tiny target, 4 HumanEval prompts, greedy,
recorded on real vLLM CPU), and the Markdown report of that summary is compared with
tests/golden/report_recorded.md. Regenerate after an intended change with SPECBENCH_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support.paths import GOLDEN, RECORDED

from specbench import api
from specbench.report.markdown import render_markdown
from specbench.results import rundir
from specbench.results.migrations import SUMMARY_SCHEMA_VERSION

GOLDEN_REPORT = GOLDEN / "report_recorded.md"


def test_recorded_run_report_golden(tmp_path: Path) -> None:
    run = tmp_path / "results" / "recorded" / "run"
    shutil.copytree(RECORDED, run)
    summary = api.analyze(run)
    assert summary.schema_version == SUMMARY_SCHEMA_VERSION
    ids = [g.group_id for g in summary.groups]
    assert ids == ["tiny/baseline/humaneval/T0/b4", "tiny/ngram/humaneval/T0/b4"]
    ngram = summary.groups[1]
    assert ngram.tau is not None and ngram.tau.n == 4 and ngram.speedup is not None and ngram.greedy_match is not None
    assert summary.checks and all(c.ok for c in summary.checks)
    # the summary on disk is the current schema and loads back to the same object
    assert api.load_summary(run) == summary
    text = render_markdown(summary, rundir.read_manifest(run))
    if os.environ.get("SPECBENCH_UPDATE_GOLDEN"):
        GOLDEN_REPORT.write_text(text)
    assert text == GOLDEN_REPORT.read_text(), f"{GOLDEN_REPORT} differs; rerun with SPECBENCH_UPDATE_GOLDEN=1 and review the diff"
