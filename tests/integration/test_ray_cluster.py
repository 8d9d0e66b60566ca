"""The Ray executor on a real Ray cluster of three nodes on this machine.

A head and two worker nodes, each its own raylet (``ray start``) under
``taskset`` with logical GPUs as engine slots, started once for the module:

    head  core 0     1 GPU
    w1    core 1     1 GPU
    w2    cores 0-1  2 GPUs, in its own mount namespace (a tmpfs hides one directory)

A model path that only the driver's filesystem has is refused before any engine
starts, naming the path and w2. Then one suite of four vLLM engines runs locally
and on the cluster: the engines spread over the nodes, each bound to cores of its
node, never two on one core at a time, and the manifest records each engine's
node and cores. During that cluster run (it leaves the cluster smaller) w1's
raylet is killed while its engine is mid-cell: only that engine's unfinished
cells fail, naming the node; the others finish; ``--resume`` on the remaining
nodes records every request once, with the same greedy tokens as the local run.
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
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import yaml

from specbench.analysis.metrics import latest_cell_records
from specbench.execution.executors.cpu_slots import parse_cpu_list
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
MARK = "SPECBENCH_TEST_RAY_CLUSTER"  # in the environment of every process of the test cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    name: str
    cores: str
    gpus: int
    port: int  # its raylet's node manager port: how Ray names it, and how the test finds the raylet
    hidden: Path | None = None  # a directory this node sees empty (its own mount namespace)

    @property
    def core_ids(self) -> set[int]:
        return set(parse_cpu_list(self.cores))

    def raylet(self) -> psutil.Process:
        for p in psutil.process_iter(["name", "cmdline"]):
            if p.info["name"] == "raylet" and f"--node_manager_port={self.port}" in (p.info["cmdline"] or []):
                return p
        raise LookupError(f"no raylet for {self.name} (port {self.port})")


@dataclass
class Cluster:
    address: str
    nodes: dict[str, Node] = field(default_factory=dict)


def _ours(token: str) -> list[psutil.Process]:
    """Every live process of the test cluster: the mark in its environment. Read from /proc
    directly: Ray's process titles overwrite the start of it, where psutil stops reading."""
    want = f"{MARK}={token}".encode()
    procs = []
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                if want in f.read().split(b"\0") and p.status() != psutil.STATUS_ZOMBIE:
                    procs.append(p)
        except (OSError, psutil.Error):
            pass
    return procs


@pytest.fixture(scope="module")
def cluster():
    """Three raylets on this machine; every one of their processes is ended at the end, even on failure."""
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent))
    assert ray_cli, "ray is part of the test install (specbench[ray])"
    if len(os.sched_getaffinity(0)) < 2 or shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs 2 cores, unshare and root (a worker node in its own mount namespace)")
    token = uuid.uuid4().hex
    tmp = Path(f"/tmp/sbray{os.getpid()}")  # Ray's socket paths must stay short
    hidden = Path(f"/tmp/sbhide{os.getpid()}")
    hidden.mkdir(exist_ok=True)
    # Token authentication off: a throwaway cluster on this machine, reached by this test only.
    # Health checks every second: a killed raylet (refusing connections) is declared dead in about
    # 5 s, not half a minute; a slow one (this machine is shared) is given 5 × 5 s.
    env = {**os.environ, MARK: token, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
           "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "5000",
           "RAY_health_check_failure_threshold": "5"}
    common = ["--disable-usage-stats", "--object-store-memory=100000000"]
    port = _free_port()
    c = Cluster(address=f"127.0.0.1:{port}")
    plan = [Node("head", "0", 1, _free_port()), Node("w1", "1", 1, _free_port()),
            Node("w2", "0-1", 2, _free_port(), hidden=hidden)]
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_AUTH_MODE", "disabled")  # the drivers (specbench run) the tests start
    try:
        for node in plan:
            where = ["--head", f"--port={port}", f"--temp-dir={tmp}", "--include-dashboard=false"] if node.name == "head" else [
                f"--address={c.address}"]
            cmd = ["taskset", "-c", node.cores, ray_cli, "start", *where, f"--num-cpus={len(node.core_ids)}",
                   f"--num-gpus={node.gpus}", f"--node-manager-port={node.port}", *common]
            if node.hidden is not None:  # its own mount namespace: a tmpfs over the directory
                cmd = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"', str(node.hidden), *cmd]
            started = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
            assert started.returncode == 0, f"{node.name}: {started.stdout[-2000:]}{started.stderr[-2000:]}"
            c.nodes[node.name] = node
        yield c
    finally:
        mp.undo()
        for p in _ours(token):
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        end = time.monotonic() + 30
        while _ours(token) and time.monotonic() < end:
            time.sleep(0.2)
        assert not _ours(token), "a process of the test cluster outlived it"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(hidden, ignore_errors=True)


def _suite(tmp_path: Path, limit: int, max_tokens: int) -> Path:
    p = tmp_path / "ray-exec.yaml"
    p.write_text(SUITE.format(limit=limit, max_tokens=max_tokens))
    return p


def _cli(suite: Path, out: Path, *extra: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specbench.cli", "run", str(suite), "--out", str(out), "--no-report", *extra],
        capture_output=True, text=True, timeout=timeout,
    )


def _run(suite: Path, out: Path, *extra: str) -> Path:
    proc = _cli(suite, out, *extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = sorted((out / "ray-exec").glob("*/"))
    return run_dir


def _on(c: Cluster) -> list[str]:
    return ["--executor", "ray", "--ray-address", c.address]


def _taus(run_dir: Path) -> dict[str, float]:
    summary = json.loads((run_dir / rundir.SUMMARY).read_text())
    return {g["group_id"]: (g.get("tau") or {}).get("value") for g in summary["groups"]}


def _once(run_dir: Path) -> Counter:
    return Counter((r.cell_id, r.prompt_id, r.sample_index) for r in rundir.read_requests(run_dir))


def _spans(run_dir: Path) -> dict[str, tuple[float, float]]:
    """Per engine, from the start of its engine to its close (the manifest's timeline, wall clock)."""
    by_engine: dict[str, tuple[float, float]] = {}
    for s in rundir.read_manifest(run_dir).timeline:
        if s.engine:
            a, b = by_engine.get(s.engine, (float("inf"), float("-inf")))
            by_engine[s.engine] = (min(a, s.start), max(b, s.end))
    return by_engine


def _node_of(port: int, placement: dict) -> bool:
    return f":{port} " in (placement.get("node_name") or "")


def test_a_path_only_the_driver_sees_is_refused_naming_the_node(cluster, tmp_path):
    from specbench.zoo.assets import ensure_assets_for

    w2 = cluster.nodes["w2"]
    assert w2.hidden is not None
    model = w2.hidden / "target"
    model.symlink_to(ensure_assets_for("trained").target, target_is_directory=True)
    # The suite with a local model path for its target (two engines, no zoo references).
    doc = yaml.safe_load(SUITE.format(limit=2, max_tokens=8))
    target = doc["targets"][0]
    target.pop("assets")
    target.update(name="local", model=str(model), methods=target["methods"][:2])
    suite = tmp_path / "ray-exec.yaml"
    suite.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    proc = _cli(suite, out, *_on(cluster), timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    lines = [ln for ln in text.splitlines() if str(model) in ln and "not found on Ray node" in ln]
    assert lines and all(f":{w2.port} " in ln for ln in lines), text[-3000:]  # w2 only: the others see it
    for run_dir in out.glob("ray-exec/*/"):  # nothing started: no engine log, no cell
        assert not list(run_dir.glob("engines/*.log")) and not rundir.read_cells(run_dir)


def _engine_pid(run_dir: Path, key: str) -> int | None:
    log = run_dir / "engines" / f"{key}.log"
    if not log.exists():
        return None
    m = re.search(rf"specbench-engine-{re.escape(key)} pid=(\d+)", log.read_text(errors="replace"))
    return int(m.group(1)) if m else None


def _raylet_of(pid: int) -> int | None:
    try:
        p = psutil.Process(pid)
        while p is not None and p.name() != "raylet":
            p = p.parent()
        return p.pid if p is not None else None
    except psutil.NoSuchProcess:
        return None


def _ray_worker_of(pid: int, raylet_pid: int) -> psutil.Process:
    """The Ray worker process (a child of the raylet) that ``pid`` descends from."""
    p = psutil.Process(pid)
    while p.ppid() != raylet_pid:
        p = p.parent()
    return p


LIMIT, MAX_TOKENS = 4, 96  # b1 and b2 cells of ~3 and ~2 s per engine: the node is lost inside one


def _check_spread_and_binding(cluster: Cluster, run_dir: Path) -> None:
    """Every engine placed by Ray on one GPU slot of a node, bound to that node's cores, the engines
    on at least two nodes, and never two engines on one core at a time (the manifest's timeline)."""
    manifest = rundir.read_manifest(run_dir)
    assert manifest.executors[0] == "ray"
    engines = {e.key: e.placement.model_dump() for e in manifest.engines if e.placement}
    assert set(engines) == set(ENGINES)
    node_cores = {n.port: n.core_ids for n in cluster.nodes.values()}
    for key, p in engines.items():
        assert p["executor"] == "ray" and p["node_id"] and len(p["gpu_ids"]) == 1, p
        (port,) = [port for port in node_cores if _node_of(port, p)]
        assert p["cpu_ids"] and set(p["cpu_ids"]) <= node_cores[port], (key, p)  # bound to its node's cores
    assert len({p["node_id"] for p in engines.values()}) >= 2, engines  # spread over the nodes
    spans = _spans(run_dir)
    assert set(spans) == set(ENGINES)
    for a in ENGINES:
        for b in ENGINES:
            overlap = min(spans[a][1], spans[b][1]) - max(spans[a][0], spans[b][0])
            if a < b and overlap > 0:
                assert set(engines[a]["cpu_ids"]).isdisjoint(engines[b]["cpu_ids"]), (a, b, engines)


def test_four_engines_over_three_nodes_as_local_and_a_lost_node_fails_only_its_cells(cluster, tmp_path, cli_runs):
    """The suite locally, then on the cluster, where w1's raylet is killed while its engine is mid-cell;
    ``--resume`` on the two nodes left finishes it: the same cells and the same greedy τ as locally,
    every request recorded once. (One run on the cluster for the spread, the binding and the node loss.)"""
    suite = _suite(tmp_path, limit=LIMIT, max_tokens=MAX_TOKENS)
    local = _run(suite, tmp_path / "local")
    w1 = cluster.nodes["w1"]
    raylet = w1.raylet()
    out = tmp_path / "out"
    proc = cli_runs.start(suite, out, *_on(cluster))
    try:
        run_dir = cli_runs.wait_for(lambda: next(iter(cli_runs.run_dirs(out, "ray-exec")), None), 600)

        def engine_mid_cell_on_w1() -> tuple[str, int] | None:
            """An engine on w1 inside its cells: some of its records, not all."""
            for key in ENGINES:
                pid = _engine_pid(run_dir, key)
                if pid and _raylet_of(pid) == raylet.pid and 1 <= cli_runs.n_records(
                        run_dir, f"tiny/{key[6:]}/") < 2 * LIMIT:
                    return key, pid
            return None

        victim, engine_pid = cli_runs.wait_for(engine_mid_cell_on_w1, 600)
        # Bound to its node's one core, as every engine on a CPU node is.
        assert os.sched_getaffinity(engine_pid) == {1}
        # The node is lost: its raylet and the Ray worker running the job at once (a worker only
        # notices its raylet's death after a check interval, in which a fast machine finished the
        # cells left: CI saw every cell ok). The engine process is left to exit on its own.
        worker = _ray_worker_of(engine_pid, raylet.pid)
        raylet.kill()
        worker.kill()
        cli_runs.wait_for(lambda: not psutil.pid_exists(engine_pid)
                          or psutil.Process(engine_pid).status() == psutil.STATUS_ZOMBIE, 60)
        stdout, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    assert proc.returncode == 0, stdout[-3000:]
    _check_spread_and_binding(cluster, run_dir)
    latest = latest_cell_records(rundir.read_cells(run_dir))
    assert len(latest) == 8
    lost = {k: c for k, c in latest.items() if c.status != "ok"}
    assert lost and all(c.engine_key == victim and c.status == "failed" for c in lost.values()), \
        {k: (c.engine_key, c.status, c.reason) for k, c in latest.items()}
    for c in lost.values():
        assert c.reason and "Ray node" in c.reason and f":{w1.port} " in c.reason and "died" in c.reason, c.reason
    # Resume on the two nodes left: the lost cells run again, every request recorded exactly once.
    resumed = _cli(suite, out, "--resume", str(run_dir), *_on(cluster))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    once = _once(run_dir)
    assert len(once) == 8 * LIMIT and set(once.values()) == {1}, once.most_common(3)
    assert set(once) == set(_once(local))
    final = latest_cell_records(rundir.read_cells(run_dir))
    assert set(final) == set(latest_cell_records(rundir.read_cells(local)))
    assert all(c.status == "ok" for c in final.values()), {k: c.reason for k, c in final.items()}
    # Greedy: every request's tokens as locally; τ as locally for the groups of the engines never lost
    # (a resumed cell's pooled counters cover its new requests only, the manifest says so).
    def outputs(d: Path) -> dict:
        return {(r.cell_id, r.prompt_id): r.output_token_ids for r in rundir.read_requests(d)}

    assert outputs(run_dir) == outputs(local)
    taus_local, taus_ray = _taus(local), _taus(run_dir)
    kept = {g for g in taus_local if f"/{victim[6:]}/" not in g}
    assert {g: taus_ray[g] for g in kept} == {g: taus_local[g] for g in kept}
    assert any(v and v > 1.5 for v in taus_ray.values())
