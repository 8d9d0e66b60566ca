"""The Ray executor: each engine job is a Ray task holding the GPUs it needs.

A job for ``g`` GPUs asks Ray for a placement group of one ``{GPU: g, CPU: 1}``
bundle, STRICT_PACK, so an engine stays on one node (vLLM with TP > 1 then
uses its ``mp`` backend inside the worker: the driver sets it). On a cluster
without GPUs every job asks for one CPU; on a CPU platform with (logical) GPUs
every job holds one GPU, so logical GPUs are engine slots. As many jobs run
at once as the cluster's free resources allow (``max_parallel`` caps it).

On the CPU platform Ray's CPU counts say nothing about which cores an engine's
OpenMP threads spin on, so each job takes a slot from :mod:`cpu_slots`: a node
and a disjoint set of that node's cores (its raylet's affinity, probed once per
run); the task is pinned to the node and binds itself and its engine to those
cores. Never more engines than cores run on a host at once, and the manifest
records each engine's node and cores.

A task streams its events back as it produces them (a Ray streaming
generator); a thread per running job feeds them to one queue that the
driver's main thread drains, so only that thread writes files. A task whose
worker or node dies ends its job with the reason; the driver fails the cells
the job left unfinished.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specbench.execution.executors.cpu_slots import CoreLease, CoreSlots, binding_env
from specbench.execution.executors.ray_nodes import NodeProbe, node_is_dead, node_name, probe_nodes
from specbench.execution.jobs import EngineJob, EngineState, JobEnded, Placement, parse_event

try:
    import ray
except ImportError:  # the optional extra: specbench[ray]
    ray = None  # type: ignore[assignment]

BATCH_S = 0.2  # a running task sends its events at least this often


def _job_task(job_data: dict[str, Any], lease_data: dict[str, Any] | None = None) -> Iterator[list[dict[str, Any]]]:
    """Runs in a Ray worker: ``run_job`` in a thread, its events yielded in batches.

    With a core lease, this thread (and so the job's thread and the engine processes
    it spawns) is bound to the lease's cores first.
    """
    from specbench.execution.worker import run_job

    job = EngineJob.model_validate(job_data)
    lease = CoreLease.model_validate(lease_data) if lease_data else None
    if lease is not None:
        os.sched_setaffinity(0, lease.cpu_ids)
    ctx = ray.get_runtime_context()
    placement = Placement(
        executor="ray", hostname=socket.gethostname(), node_id=ctx.get_node_id(),
        node_ip=ray.util.get_node_ip_address(), node_name=lease.node_name if lease else None, pid=os.getpid(),
        gpu_ids=[str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
        cpu_ids=sorted(lease.cpu_ids) if lease else [],
    )
    events: queue.Queue = queue.Queue()
    done = object()

    def body() -> None:
        from specbench.engines.child import close_hosts

        try:
            run_job(job, lambda e: events.put(e.model_dump(mode="json")), placement)
        finally:
            close_hosts()  # no idle engine host outlives its task in a reused worker
            events.put(done)

    threading.Thread(target=body, name=f"specbench-job-{job.job_id}", daemon=True).start()
    finished = False
    while not finished:
        batch = [events.get()]
        deadline = time.monotonic() + BATCH_S
        while time.monotonic() < deadline:
            try:
                batch.append(events.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            if batch[-1] is done:
                break
        if batch[-1] is done:
            batch.pop()
            finished = True
        if batch:
            yield batch


def cluster_has_gpus() -> bool:
    return ray.cluster_resources().get("GPU", 0) > 0


class RayExecutor:
    name = "ray"

    def __init__(self, address: str | None = None, max_parallel: int | None = None):
        if ray is None:
            raise RuntimeError("the Ray executor needs Ray: pip install 'specbench[ray]'")
        self.address = address
        self.max_parallel = max_parallel
        self._lock = threading.Lock()
        self._running: dict[str, Any] = {}  # job id → streaming generator
        self._groups: dict[str, Any] = {}  # job id → placement group
        self._nodes: list[NodeProbe] | None = None  # probed once per run
        self._stopping = False
        self._init()

    def _init(self) -> None:
        if ray.is_initialized():
            return
        env = {k: v for k, v in os.environ.items() if k.startswith("SPECBENCH_")}
        ray.init(address=self.address, log_to_driver=False, runtime_env={"env_vars": env} if env else None,
                 configure_logging=False)

    # -- checks ---------------------------------------------------------------

    def check(self, jobs: Sequence[EngineJob]) -> list[str]:
        """Probe every live node (its cores, for CPU engines); every local model/speculator
        path must exist on every node."""
        paths = sorted({p for j in jobs for p in j.engine.local_paths()})
        self._nodes = probe_nodes(paths)
        problems = []
        for node in self._nodes:
            for p in node.missing:
                problems.append(f"{p}: not found on Ray node {node.name}; a local model or zoo path must be on "
                                "storage every node mounts at the same path (or use a hub id)")
        return problems

    # -- running --------------------------------------------------------------

    def _options(self, job: EngineJob, gpu_cluster: bool, lease: CoreLease | None) -> dict[str, Any]:
        gpus = max(job.gpus, 1) if gpu_cluster else 0
        opts: dict[str, Any] = {"num_cpus": 1, "num_gpus": gpus, "max_retries": 0, "name": f"specbench:{job.job_id}"}
        if lease is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(lease.node_id, soft=False)
            return opts
        if gpus > 1:
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            pg = placement_group([{"GPU": gpus, "CPU": 1}], strategy="STRICT_PACK")
            with self._lock:
                self._groups[job.job_id] = pg
            ray.get(pg.ready())
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        return opts

    def _follow(self, job: EngineJob, gpu_cluster: bool, out: queue.Queue, slots: threading.Semaphore,
                cores: CoreSlots | None) -> None:
        """Submit one job, forward its events, and end it (with the reason when its worker died)."""
        error = None
        ended = False
        lease = None
        node_id = None
        with slots:
            try:
                if self._stopping:
                    raise RuntimeError("the run was stopped before this job started")
                if cores is not None:
                    lease = cores.take()
                    while lease is not None and node_is_dead(lease.node_id):  # lost since the last job ended
                        cores.node_lost(lease.node_id)
                        cores.give_back(lease)
                        lease = cores.take()
                    if lease is None:
                        raise _NoSlot("no live Ray node has cores free for an engine")
                    node_id = lease.node_id
                    job = _bound(job, lease)
                task = ray.remote(_job_task).options(num_returns="streaming", **self._options(job, gpu_cluster, lease))
                gen = task.remote(job.model_dump(mode="json"), lease.model_dump() if lease else None)
                with self._lock:
                    self._running[job.job_id] = gen
                for ref in gen:
                    for data in ray.get(ref):
                        ev = parse_event(data)
                        if isinstance(ev, EngineState) and ev.placement is not None:
                            node_id = ev.placement.node_id or node_id
                        if isinstance(ev, JobEnded):
                            ended = True
                            with self._lock:  # nothing left to cancel
                                self._running.pop(job.job_id, None)
                        out.put(ev)
                if not ended:
                    error = "the Ray task ended without finishing its job"
            except _NoSlot as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - a dead worker or node ends this job only
                if not ended:
                    error = self._death_reason(exc, node_id, cores)
            finally:
                with self._lock:
                    self._running.pop(job.job_id, None)
                    pg = self._groups.pop(job.job_id, None)
                if pg is not None:
                    ray.util.remove_placement_group(pg)
                if lease is not None and cores is not None:
                    cores.give_back(lease)
        if error is not None:
            out.put(JobEnded(job_id=job.job_id, error=error))

    def _death_reason(self, exc: Exception, node_id: str | None, cores: CoreSlots | None) -> str:
        """The reason a job's task failed, naming its node (dead, or alive with a dead worker)."""
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        if node_id is None or self._stopping:
            return f"Ray worker or node died: {type(exc).__name__}: {first}"
        name = self._node_name(node_id)
        if node_is_dead(node_id, wait_s=20):  # Ray's health checks lag a lost node by seconds
            if cores is not None:
                cores.node_lost(node_id)
            return f"Ray node {name} died: {type(exc).__name__}: {first}"
        return f"Ray worker died on node {name}: {type(exc).__name__}: {first}"

    def _node_name(self, node_id: str) -> str:
        for probe in self._nodes or []:
            if probe.node_id == node_id:
                return probe.name
        for n in ray.nodes():
            if n.get("NodeID") == node_id:
                return node_name(n)
        return f"(node {node_id[:8]})"

    def _core_slots(self, jobs: Sequence[EngineJob], gpu_cluster: bool) -> CoreSlots | None:
        """CPU engines get core slots on the live nodes (probed by ``check``, or now)."""
        if not jobs or any(j.platform != "cpu" for j in jobs):
            return None
        if self._nodes is None:
            self._nodes = probe_nodes([])
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        return CoreSlots([n.cores_for_engines(gpu_cluster) for n in self._nodes if n.node_id in alive])

    def run(self, jobs: Sequence[EngineJob], emit: Callable[[Any], None]) -> None:
        jobs = [self._prepared(j) for j in jobs]
        gpu_cluster = cluster_has_gpus()
        slots = threading.Semaphore(self.max_parallel or len(jobs) or 1)
        cores = self._core_slots(jobs, gpu_cluster)
        out: queue.Queue = queue.Queue()
        threads = [threading.Thread(target=self._follow, args=(j, gpu_cluster, out, slots, cores), daemon=True)
                   for j in jobs]
        for t in threads:
            t.start()
        ended = 0
        while ended < len(jobs):
            try:
                ev = out.get(timeout=0.5)  # wakes for signals
            except queue.Empty:
                continue
            emit(ev)
            ended += isinstance(ev, JobEnded)

    @staticmethod
    def _prepared(job: EngineJob) -> EngineJob:
        """vLLM with TP > 1 inside a Ray worker must use its multiprocessing backend."""
        if job.gpus <= 1 or "distributed_executor_backend" in job.engine.engine_kwargs:
            return job
        kwargs = {**job.engine.engine_kwargs, "distributed_executor_backend": "mp"}
        return job.model_copy(update={"engine": job.engine.model_copy(update={"engine_kwargs": kwargs})})

    def shutdown(self) -> None:
        """Cancel every running task (its worker is killed; engine processes die with it)."""
        self._stopping = True
        with self._lock:
            running = list(self._running.values())
            groups = list(self._groups.values())
        for gen in running:
            try:
                ray.cancel(gen, force=True)
            except Exception:  # noqa: BLE001 - already ended
                pass
        for pg in groups:
            try:
                ray.util.remove_placement_group(pg)
            except Exception:  # noqa: BLE001
                pass


class _NoSlot(Exception):
    pass


def _bound(job: EngineJob, lease: CoreLease) -> EngineJob:
    """The job with its engine's thread count and vLLM's core binding set to the lease's cores."""
    env = {**job.engine.env, **binding_env(lease.cpu_ids)}
    return job.model_copy(update={"engine": job.engine.model_copy(update={"env": env})})
