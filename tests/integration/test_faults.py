"""Faults on real vLLM CPU: a killed engine fails only its cells; --resume records
every request exactly once."""

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from specbench import store
from specbench.metrics import latest_cell_records

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


def _start(suite: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "specbench.cli", "run", str(suite), "--out", str(out), "--no-report", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def _wait_for(pred, timeout=300.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _run_dir(out: Path) -> Path | None:
    dirs = sorted((out / "faults").glob("*/")) if (out / "faults").exists() else []
    return dirs[-1] if dirs else None


def _n_records(run_dir: Path | None, cell_prefix: str = "") -> int:
    if run_dir is None or not (run_dir / store.RECORDS).exists():
        return 0
    return sum(1 for o in store.iter_jsonl(run_dir / store.RECORDS) if o["cell_id"].startswith(cell_prefix))


@pytest.fixture
def suite(tmp_path):
    p = tmp_path / "faults.yaml"
    p.write_text(SUITE)
    return p


def test_killing_an_engine_fails_only_its_cell(suite, tmp_path):
    out = tmp_path / "out"
    proc = _start(suite, out)
    run_dir = _wait_for(lambda: _run_dir(out))
    # Mid-cell: the baseline engine's first cell has produced a record.
    _wait_for(lambda: _n_records(run_dir, "tiny/baseline/he/T0/b1") >= 1)
    log = (run_dir / "engines" / "tiny--baseline.log").read_text()
    pid = int(re.search(r"specbench-engine-tiny--baseline pid=(\d+)", log).group(1))
    os.kill(pid, signal.SIGKILL)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
    latest = latest_cell_records(store.read_cells(run_dir))
    assert latest["tiny/baseline/he/T0/b1/r0"].status == "failed"
    assert "died" in latest["tiny/baseline/he/T0/b1/r0"].reason
    # The engine was restarted for its next cell; the other engine never noticed.
    assert latest["tiny/baseline/he/T0/b2/r0"].status == "ok"
    assert latest["tiny/ngram/he/T0/b1/r0"].status == "ok"
    assert latest["tiny/ngram/he/T0/b2/r0"].status == "ok"
    # What the killed cell had received is kept.
    assert _n_records(run_dir, "tiny/baseline/he/T0/b1") >= 1


def test_resume_records_every_request_exactly_once(suite, tmp_path):
    out = tmp_path / "out"
    proc = _start(suite, out)
    run_dir = _wait_for(lambda: _run_dir(out))
    _wait_for(lambda: _n_records(run_dir) >= 3)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run: CLI and engine child
    proc.wait(timeout=60)
    before = _n_records(run_dir)
    assert 0 < before < 24
    resumed = _start(suite, out, "--resume", str(run_dir))
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output
    recs = store.read_requests(run_dir)
    keys = Counter((r.cell_id, r.prompt_id, r.sample_index) for r in recs)
    assert len(keys) == 4 * 6 and set(keys.values()) == {1}, keys.most_common(3)
    latest = latest_cell_records(store.read_cells(run_dir))
    assert len(latest) == 4 and all(c.status == "ok" for c in latest.values())
    assert len(_run_dir_list(out)) == 1  # resumed in place, no new run directory


def _run_dir_list(out: Path) -> list[Path]:
    return sorted((out / "faults").glob("*/"))
