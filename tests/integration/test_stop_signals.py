"""Stopping a run on real vLLM CPU: SIGTERM or SIGINT to the `specbench` process alone, mid-cell.

SIGTERM arrives in a launched server's cell (the baseline, ``vllm-server``), SIGINT in an offline
engine's cell (ngram, ``vllm-offline``) of the resumed run. Each stop ends the run within 30 s with
128 + the signal's number, says how to resume on its last line, leaves no process it started (the
vLLM API server and its EngineCore, the offline engine's worker), and ``--resume`` then records every
request exactly once. Run under the CPU lock:
``flock /tmp/specbench-cpu.lock pytest tests/integration/test_stop_signals.py``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from specbench.analysis.metrics import latest_cell_records
from specbench.results import rundir

SUITE = """
name: stops
targets:
  - name: tiny
    model: tiny
    engine: vllm-server
    dtype: float32
    max_model_len: 1024
    methods:
      - method: baseline
  - name: offline
    model: tiny
    dtype: float32
    max_model_len: 1024
    methods:
      - method: ngram
        num_speculative_tokens: 3
datasets:
  - name: he
    kind: humaneval
    limit: 6
sampling:
  max_tokens: 64
load:
  batch_sizes: [1]
warmup: false
"""


def _started_by(pid: int, run_dir: Path) -> list[psutil.Process]:
    """The run's descendants, and any process naming its run directory or the port of the server now running."""
    procs = psutil.Process(pid).children(recursive=True)
    logs = sorted((run_dir / "engines").glob("*.log"), key=lambda p: p.stat().st_mtime)
    ports = re.findall(r"\[specbench\] starting: .*--port (\d+)", logs[-1].read_text()) if logs else []
    marks = [str(run_dir), *(f"--port {p}" for p in ports[-1:])]
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.pid != os.getpid() and any(m in cmd for m in marks):
            procs.append(p)
    return procs


def _alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture
def suite(tmp_path):
    p = tmp_path / "stops.yaml"
    p.write_text(SUITE)
    return p


def _stop_mid_cell(cli_runs, proc: subprocess.Popen, run_dir: Path, cell: str, sig: signal.Signals) -> None:
    """Once ``cell`` has a record, send ``sig`` to the specbench process alone; check how the run ends."""
    cli_runs.wait_for(lambda: cli_runs.n_records(run_dir, cell) >= 1)
    started = _started_by(proc.pid, run_dir)
    # An engine is among them: a vLLM API server, or an offline engine's worker (its pid in its log).
    workers = {int(pid) for log in (run_dir / "engines").glob("*.log")
               for pid in re.findall(r"specbench-engine-\S+ pid=(\d+)", log.read_text(errors="replace"))}
    assert any("vllm" in " ".join(p.cmdline()) or p.pid in workers for p in started), [p.cmdline() for p in started]
    t0 = time.monotonic()
    os.kill(proc.pid, sig)  # not its process group
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        for p in started:
            p.kill()
        raise AssertionError(f"{sig.name}: the run did not end within 30 s") from None
    print(f"{sig.name}: the run ended {time.monotonic() - t0:.1f} s after the signal")
    assert proc.returncode == 128 + sig, output
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"interrupted by {sig.name} after ") and f"--resume {run_dir}" in last, output
    end = time.monotonic() + 5  # the run has exited: what it started is gone now, or within seconds
    while _alive(started) and time.monotonic() < end:
        time.sleep(0.1)
    assert _alive(started) == [], f"left running after {sig.name}: {_alive(started)}"
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    assert manifest["status"] == "interrupted" and manifest["interrupted_by"] == sig.name


def test_sigterm_then_sigint_stop_the_run_and_resume_completes_it(suite, tmp_path, cli_runs):
    """One run stopped twice (engine starts are what costs): SIGTERM in the server's cell, SIGINT in the
    offline engine's cell of the resumed run; a second resume completes it."""
    out = tmp_path / "out"
    proc = cli_runs.start(suite, out)
    run_dir = cli_runs.wait_for(lambda: cli_runs.run_dirs(out, "stops"))[-1]
    _stop_mid_cell(cli_runs, proc, run_dir, "tiny/baseline/he/T0/b1", signal.SIGTERM)
    assert 1 <= cli_runs.n_records(run_dir) < 12

    resumed = cli_runs.start(suite, out, "--resume", str(run_dir))
    _stop_mid_cell(cli_runs, resumed, run_dir, "offline/ngram/he/T0/b1", signal.SIGINT)
    assert latest_cell_records(rundir.read_cells(run_dir))["tiny/baseline/he/T0/b1/r0"].status == "ok"

    resumed = cli_runs.start(suite, out, "--resume", str(run_dir))
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output
    keys = Counter((r.cell_id, r.prompt_id, r.sample_index) for r in rundir.read_requests(run_dir))
    assert len(keys) == 2 * 6 and set(keys.values()) == {1}, keys.most_common(3)
    latest = latest_cell_records(rundir.read_cells(run_dir))
    assert len(latest) == 2 and all(c.status == "ok" for c in latest.values()), latest
    assert json.loads((run_dir / rundir.MANIFEST).read_text())["status"] == "complete"
