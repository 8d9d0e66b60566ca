"""Engine slots on CPU nodes: which cores each engine may use (pure computation).

Ray's CPU resources are counts, not core ids, so two CPU engines that Ray places
on one node run their OpenMP threads over the same cores and slow each other
down many times over. Here each node's own cores (the affinity of its raylet,
probed on the node) are split into disjoint chunks, one per engine slot; a job
takes a free chunk on some node and its engine is bound to it.

Core ids belong to a machine, not to a Ray node: several raylets on one host
(a test cluster, or pods sharing a VM's cpuset) may list the same cores, so a
core is taken per host, whichever node's chunk holds it. Never more engines
than cores: a node offers at most one slot per core.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field


class NodeCores(BaseModel):
    """What a probe learned about one Ray node."""

    model_config = ConfigDict(extra="forbid")

    node_id: str
    name: str  # how messages name it: the hostname and Ray node IP, with the id's head
    host: str  # cores are shared per host (its hostname; raylets of one machine share it)
    cores: list[int]  # the raylet's CPU affinity
    engine_slots: int  # engines Ray can hold there at once (its logical GPUs, or CPUs)


class CoreLease(BaseModel):
    """A job's slot: the node it must run on and the cores its engine is bound to."""

    model_config = ConfigDict(extra="forbid")

    node_id: str
    node_name: str
    cpu_ids: list[int] = Field(default_factory=list)


def parse_cpu_list(text: str) -> list[int]:
    """``"0-2,5"`` → ``[0, 1, 2, 5]`` (the kernel's and taskset's list format)."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"bad CPU range {part!r} in {text!r}")
        out.update(range(a, b + 1))
    return sorted(out)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    ids = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        runs.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(runs)


def split_cores(cores: Sequence[int], slots: int) -> list[list[int]]:
    """Disjoint runs of neighbouring cores, one per slot (never more slots than cores);
    the first ``len(cores) % n`` chunks get one core more."""
    ids = sorted(set(cores))
    n = min(max(slots, 0), len(ids))
    if n == 0:
        return []
    size, extra = divmod(len(ids), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        chunks.append(ids[start:end])
        start = end
    return chunks


def binding_env(cpu_ids: Sequence[int]) -> dict[str, str]:
    """The environment that holds an engine to its cores.

    The worker process is pinned to the cores (``os.sched_setaffinity``, inherited
    by the engine it spawns); OpenMP sizes its pool from ``OMP_NUM_THREADS``;
    ``VLLM_CPU_OMP_THREADS_BIND`` is vLLM's own binding (used by its
    multiprocessing executor; with one process per engine the affinity does it).
    """
    ids = format_cpu_list(cpu_ids)
    return {"OMP_NUM_THREADS": str(len(set(cpu_ids))), "VLLM_CPU_OMP_THREADS_BIND": ids}


class CoreSlots:
    """Free and taken core chunks over a cluster's nodes (thread-safe; ``take`` waits).

    ``take`` picks, among live nodes with a chunk whose cores are all free on its
    host, the node that has started the fewest engines so far (spreading work over
    the nodes), then the first such chunk.
    """

    def __init__(self, nodes: Sequence[NodeCores]):
        self._nodes = {n.node_id: n for n in nodes}
        self._chunks = {n.node_id: split_cores(n.cores, n.engine_slots) for n in nodes}
        self._taken: dict[str, set[int]] = {}  # host → cores in use
        self._started: dict[str, int] = {n.node_id: 0 for n in nodes}
        self._dead: set[str] = set()
        self._cv = threading.Condition()

    @property
    def capacity(self) -> int:
        """Engines that can run at once on the live nodes (cores shared per host counted once)."""
        with self._cv:
            return _capacity(self._live_chunks())

    def _live_chunks(self) -> dict[str, list[tuple[str, list[int]]]]:
        by_host: dict[str, list[tuple[str, list[int]]]] = {}
        for node_id, chunks in self._chunks.items():
            if node_id not in self._dead:
                by_host.setdefault(self._nodes[node_id].host, []).extend((node_id, c) for c in chunks)
        return by_host

    def _free(self) -> tuple[str, list[int]] | None:
        best: tuple[int, int, str, list[int]] | None = None
        for order, (node_id, chunks) in enumerate(self._chunks.items()):
            if node_id in self._dead:
                continue
            taken = self._taken.get(self._nodes[node_id].host, set())
            for chunk in chunks:
                if not taken.intersection(chunk):
                    key = (self._started[node_id], order, node_id, chunk)
                    if best is None or key[:2] < best[:2]:
                        best = key
                    break
        return None if best is None else (best[2], best[3])

    def try_take(self) -> CoreLease | None:
        with self._cv:
            return self._take_locked()

    def _take_locked(self) -> CoreLease | None:
        free = self._free()
        if free is None:
            return None
        node_id, chunk = free
        self._taken.setdefault(self._nodes[node_id].host, set()).update(chunk)
        self._started[node_id] += 1
        return CoreLease(node_id=node_id, node_name=self._nodes[node_id].name, cpu_ids=list(chunk))

    def take(self, timeout: float | None = None) -> CoreLease | None:
        """A free slot, waiting for one; None when no live node has a slot at all (or on timeout)."""
        with self._cv:
            lease = self._take_locked()
            while lease is None and _capacity(self._live_chunks()) > 0:
                if not self._cv.wait(timeout):
                    return None
                lease = self._take_locked()
            return lease

    def give_back(self, lease: CoreLease) -> None:
        with self._cv:
            host = self._nodes[lease.node_id].host
            self._taken.get(host, set()).difference_update(lease.cpu_ids)
            self._cv.notify_all()

    def node_lost(self, node_id: str) -> None:
        """A dead node offers no more slots (its running jobs still give theirs back)."""
        with self._cv:
            self._dead.add(node_id)
            self._cv.notify_all()


def _capacity(by_host: dict[str, list[tuple[str, list[int]]]]) -> int:
    """Per host, the most chunks that are pairwise disjoint (greedy over the chunks, smallest first)."""
    total = 0
    for chunks in by_host.values():
        used: set[int] = set()
        for _, chunk in sorted(chunks, key=lambda c: (len(c[1]), c[1])):
            if not used.intersection(chunk):
                used.update(chunk)
                total += 1
    return total
