"""Faults on real vLLM CPU: a killed engine fails only its cells; --resume records
every request exactly once, as the stored suite says (the YAML is edited before the resume)."""

import os
import re
import signal
from collections import Counter
from pathlib import Path

import pytest

from specbench.analysis.metrics import latest_cell_records
from specbench.results import rundir

SUITE = """
name: faults
targets:
  - name: tiny
    model: tiny
    dtype: float32
    max_model_len: 1024
    methods:
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
datasets:
  - name: he
    kind: humaneval
    limit: 6
sampling:
  max_tokens: 160
load:
  batch_sizes: [1, 2]
warmup: false
"""


def _run_dir(cli_runs, out: Path) -> Path | None:
    dirs = cli_runs.run_dirs(out, "faults")
    return dirs[-1] if dirs else None


@pytest.fixture
def suite(tmp_path):
    p = tmp_path / "faults.yaml"
    p.write_text(SUITE)
    return p


def test_a_killed_engine_fails_only_its_cell_and_a_killed_run_resumes_every_request_once(suite, tmp_path, cli_runs):
    """One run, two faults: the baseline engine is SIGKILLed inside its first cell (that cell fails, the
    engine is restarted for its next one, the other engine never notices); then, inside the ngram
    engine's first cell, the whole run is SIGKILLed. ``--resume`` records every request exactly once."""
    out = tmp_path / "out"
    proc = cli_runs.start(suite, out)
    try:
        run_dir = cli_runs.wait_for(lambda: _run_dir(cli_runs, out))
        # Mid-cell: the baseline engine's first cell has produced a record.
        cli_runs.wait_for(lambda: cli_runs.n_records(run_dir, "tiny/baseline/he/T0/b1") >= 1)
        log = (run_dir / "engines" / "tiny--baseline.log").read_text()
        pid = int(re.search(r"specbench-engine-tiny--baseline pid=(\d+)", log).group(1))
        os.kill(pid, signal.SIGKILL)
        cli_runs.wait_for(lambda: cli_runs.n_records(run_dir, "tiny/ngram/he/T0/b1") >= 1)
        latest = latest_cell_records(rundir.read_cells(run_dir))
        assert latest["tiny/baseline/he/T0/b1/r0"].status == "failed"
        assert "died" in latest["tiny/baseline/he/T0/b1/r0"].reason
        # The engine was restarted for its next cell.
        assert latest["tiny/baseline/he/T0/b2/r0"].status == "ok"
        # What the killed cell had received is kept.
        killed_cell = cli_runs.n_records(run_dir, "tiny/baseline/he/T0/b1")
        assert killed_cell >= 1
        os.killpg(proc.pid, signal.SIGKILL)  # the whole run: CLI and engine child
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = cli_runs.n_records(run_dir)
    assert 0 < before < 24
    # Edited after the stop: a resumed run acts on the suite stored in its manifest, not on this.
    suite.write_text(SUITE.replace("limit: 6", "limit: 2").replace("max_tokens: 160", "max_tokens: 8"))
    resumed = cli_runs.start(suite, out, "--resume", str(run_dir))
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output
    recs = rundir.read_requests(run_dir)
    keys = Counter((r.cell_id, r.prompt_id, r.sample_index) for r in recs)
    assert len(keys) == 4 * 6 and set(keys.values()) == {1}, keys.most_common(3)
    latest = latest_cell_records(rundir.read_cells(run_dir))
    assert len(latest) == 4 and all(c.status == "ok" for c in latest.values()), {k: c.reason for k, c in latest.items()}
    assert len(cli_runs.run_dirs(out, "faults")) == 1  # resumed in place, no new run directory
