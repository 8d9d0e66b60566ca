"""The Ray executor on a real local Ray instance (``ray start --head`` with logical GPUs).

One suite of four vLLM engines runs locally and on Ray, two engines at a time:
the same cells, every request once, the same greedy τ, the node and GPU each
engine ran on in the manifest. Then faults: the Ray worker running an engine
is killed mid-cell (only that engine's unfinished cells fail, with the
reason), the driver is killed, and ``--resume`` records every request exactly
once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import psutil
import pytest

from specbench.analysis.metrics import latest_cell_records
from specbench.results import rundir

SUITE = """
name: ray-exec
targets:
  - name: tiny
    model: tiny
    assets: trained
    dtype: float32
    max_model_len: 1024
    methods:
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
      - name: self-draft
        method: draft_model
        speculator: target
        num_speculative_tokens: 3
      - method: eagle3
        speculator: tiny:eagle3
        num_speculative_tokens: 3
datasets:
  - name: he
    kind: humaneval
    limit: {limit}
sampling:
  max_tokens: {max_tokens}
load:
  batch_sizes: [1, 2]
warmup: false
"""
ENGINES = ["tiny--baseline", "tiny--ngram", "tiny--self-draft", "tiny--eagle3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A real Ray head on this machine: 2 logical GPUs (engine slots), 4 CPUs."""
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent))
    assert ray_cli, "ray is part of the test install (specbench[ray])"
    port = _free_port()
    tmp = Path(f"/tmp/sbray{os.getpid()}")  # Ray's socket paths must stay short
    # Token authentication off: a throwaway cluster on this machine, reached by this test only.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    subprocess.run(
        [ray_cli, "start", "--head", f"--port={port}", "--num-cpus=4", "--num-gpus=2", "--include-dashboard=false",
         f"--temp-dir={tmp}", "--disable-usage-stats"],
        check=True, env=env, capture_output=True, timeout=180,
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray_cli, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


def _suite(tmp_path: Path, limit: int, max_tokens: int) -> Path:
    p = tmp_path / "ray-exec.yaml"
    p.write_text(SUITE.format(limit=limit, max_tokens=max_tokens))
    return p


def _run(suite: Path, out: Path, *extra: str, timeout: float = 900) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "specbench.cli", "run", str(suite), "--out", str(out), "--no-report", *extra],
        capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = sorted((out / "ray-exec").glob("*/"))
    return run_dir


def _taus(run_dir: Path) -> dict[str, float]:
    summary = json.loads((run_dir / rundir.SUMMARY).read_text())
    return {g["group_id"]: (g.get("tau") or {}).get("value") for g in summary["groups"]}


def _once(run_dir: Path) -> Counter:
    return Counter((r.cell_id, r.prompt_id, r.sample_index) for r in rundir.read_requests(run_dir))


def _spans(run_dir: Path) -> list[tuple[float, float]]:
    """Per engine, from the start of its engine to its close (the manifest's timeline, wall clock)."""
    by_engine: dict[str, tuple[float, float]] = {}
    for s in rundir.read_manifest(run_dir).get("timeline") or []:
        if s.get("engine"):
            a, b = by_engine.get(s["engine"], (float("inf"), float("-inf")))
            by_engine[s["engine"]] = (min(a, s["start"]), max(b, s["end"]))
    return list(by_engine.values())


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    points = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


def test_ray_runs_the_same_cells_as_local_two_at_a_time(ray_cluster, tmp_path):
    suite = _suite(tmp_path, limit=4, max_tokens=48)
    local = _run(suite, tmp_path / "local")
    on_ray = _run(suite, tmp_path / "ray", "--executor", "ray", "--ray-address", ray_cluster,
                  "--max-parallel-engines", "2")
    cells_local = latest_cell_records(rundir.read_cells(local))
    cells_ray = latest_cell_records(rundir.read_cells(on_ray))
    assert set(cells_ray) == set(cells_local) and len(cells_ray) == 8
    assert all(c.status == "ok" for c in cells_ray.values()), {k: c.reason for k, c in cells_ray.items()}
    once = _once(on_ray)
    assert set(once.values()) == {1} and set(once) == set(_once(local))
    taus_local, taus_ray = _taus(local), _taus(on_ray)
    assert taus_ray == taus_local and any(v and v > 1.5 for v in taus_ray.values())
    manifest = rundir.read_manifest(on_ray)
    assert manifest["executors"] == ["ray"]
    engines = {e["key"]: e for e in manifest["engines"]}
    assert set(engines) == set(ENGINES)
    for e in engines.values():
        p = e["placement"]
        assert p["executor"] == "ray" and p["node_id"] and p["node_ip"] and len(p["gpu_ids"]) == 1, p
    # Two slots (logical GPUs and --max-parallel-engines 2): engines overlapped, never more than two.
    spans = _spans(on_ray)
    assert len(spans) == 4 and _max_overlap(spans) == 2, spans


def _engine_pid(run_dir: Path, key: str) -> int | None:
    log = run_dir / "engines" / f"{key}.log"
    if not log.exists():
        return None
    m = re.search(rf"specbench-engine-{re.escape(key)} pid=(\d+)", log.read_text(errors="replace"))
    return int(m.group(1)) if m else None


def test_killed_worker_fails_its_cells_killed_driver_resumes_exactly_once(ray_cluster, tmp_path, cli_runs):
    suite = _suite(tmp_path, limit=6, max_tokens=160)
    out = tmp_path / "out"
    args = ["--executor", "ray", "--ray-address", ray_cluster, "--max-parallel-engines", "2"]
    proc = cli_runs.start(suite, out, *args)
    run_dir = cli_runs.wait_for(lambda: next(iter(cli_runs.run_dirs(out, "ray-exec")), None), 600)
    # Mid-cell in the baseline engine: kill the Ray worker process that runs its job.
    cli_runs.wait_for(lambda: cli_runs.n_records(run_dir, "tiny/baseline/he/T0/b1") >= 1, 600)
    engine_pid = _engine_pid(run_dir, "tiny--baseline")
    worker = psutil.Process(engine_pid).parent()
    assert "ray" in " ".join(worker.cmdline()).lower() or worker.name().startswith("ray"), worker.cmdline()
    worker.kill()
    cli_runs.wait_for(lambda: not psutil.pid_exists(engine_pid) or psutil.Process(engine_pid).status() == "zombie", 60)
    failed = cli_runs.wait_for(lambda: [c for c in rundir.read_cells(run_dir) if c.engine_key == "tiny--baseline"
                                and c.status == "failed"], 120)
    assert "Ray worker" in failed[0].reason, failed[0].reason
    # Then the driver dies mid-run (the whole process group, as a cancelled CI job would).
    cli_runs.wait_for(lambda: cli_runs.n_records(run_dir) >= cli_runs.n_records(run_dir, "tiny/baseline") + 3, 600)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    latest = latest_cell_records(rundir.read_cells(run_dir))
    baseline_cells = {k: c for k, c in latest.items() if c.engine_key == "tiny--baseline"}
    assert baseline_cells and all(c.status == "failed" for c in baseline_cells.values())
    assert any(c.status == "ok" for c in latest.values() if c.engine_key != "tiny--baseline") or len(latest) < 8
    resumed = subprocess.run(
        [sys.executable, "-m", "specbench.cli", "run", str(suite), "--out", str(out), "--resume", str(run_dir), *args,
         "--no-report"],
        capture_output=True, text=True, timeout=900,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    once = _once(run_dir)
    assert len(once) == 8 * 6 and set(once.values()) == {1}, once.most_common(3)
    final = latest_cell_records(rundir.read_cells(run_dir))
    assert len(final) == 8 and all(c.status == "ok" for c in final.values())
