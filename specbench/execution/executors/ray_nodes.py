"""The nodes of a Ray cluster as the Ray executor sees them: one probe task per
live node (pinned there) reports the node's hostname, its raylet's CPU cores and
which of the run's local paths it lacks; names for messages; liveness.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specbench.execution.executors.cpu_slots import NodeCores

try:
    import ray
except ImportError:  # the optional extra: specbench[ray]
    ray = None  # type: ignore[assignment]


class NodeProbe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_id: str
    name: str
    hostname: str
    cores: list[int]
    missing: list[str] = Field(default_factory=list)
    resources: dict[str, float] = Field(default_factory=dict)

    def engine_slots(self, gpu_cluster: bool) -> int:
        """Engines this node can hold at once: one per core, per Ray CPU and (on a cluster
        with GPUs, where each CPU-platform engine holds a logical GPU) per GPU."""
        slots = min(len(self.cores), int(self.resources.get("CPU", 0)))
        return min(slots, int(self.resources.get("GPU", 0))) if gpu_cluster else slots

    def cores_for_engines(self, gpu_cluster: bool) -> NodeCores:
        return NodeCores(node_id=self.node_id, name=self.name, host=self.hostname, cores=self.cores,
                         engine_slots=self.engine_slots(gpu_cluster))


def raylet_cores() -> list[int]:
    """The CPU affinity of the raylet this process descends from (its node's cores); this
    process's own where no raylet is found."""
    pid = os.getpid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "raylet":
                    return sorted(os.sched_getaffinity(pid))
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid <= 1:
            break
    return sorted(os.sched_getaffinity(0))


def _probe(paths: list[str]) -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "cores": raylet_cores(),
            "missing": [p for p in paths if not os.path.exists(p)]}


def node_name(node: dict[str, Any], hostname: str | None = None) -> str:
    """``host ip:port (node 1a2b3c4d)``: several raylets may share a host and an IP."""
    where = f"{node.get('NodeManagerAddress')}:{node.get('NodeManagerPort')}"
    host = f"{hostname} " if hostname and hostname != node.get("NodeManagerAddress") else ""
    return f"{host}{where} (node {str(node.get('NodeID', ''))[:8]})"


def live_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive")]


def probe_nodes(paths: Sequence[str], timeout: float = 120) -> list[NodeProbe]:
    """Run the probe on every live node, pinned there (``num_cpus=0``: it never waits for a slot)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0, max_retries=0)(_probe)
    nodes = live_nodes()
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(list(paths))
            for n in nodes]
    out = []
    for n, ref in zip(nodes, refs, strict=True):
        got = ray.get(ref, timeout=timeout)
        out.append(NodeProbe(node_id=n["NodeID"], name=node_name(n, got["hostname"]), hostname=got["hostname"],
                             cores=got["cores"], missing=got["missing"], resources=n.get("Resources") or {}))
    return out


def node_is_dead(node_id: str, wait_s: float = 0.0) -> bool:
    """Whether Ray reports the node dead, asking again for up to ``wait_s`` (its health checks lag)."""
    end = time.monotonic() + wait_s
    while True:
        states = {n["NodeID"]: n.get("Alive") for n in ray.nodes()}
        if not states.get(node_id, False):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.5)
