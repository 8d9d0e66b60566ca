"""The Ray executor: each engine job is a Ray task holding the GPUs it needs.

A job for ``g`` GPUs asks Ray for a placement group of one ``{GPU: g, CPU: 1}``
bundle, STRICT_PACK, so an engine stays on one node (vLLM with TP > 1 then
uses its ``mp`` backend inside the worker: the driver sets it). On a cluster
without GPUs every job asks for one CPU; on a CPU platform with (logical) GPUs
every job holds one GPU, so logical GPUs are engine slots. As many jobs run
at once as the cluster's free resources allow (``max_parallel`` caps it).

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

from specbench.execution.jobs import EngineJob, JobEnded, Placement, parse_event

try:
    import ray
except ImportError:  # the optional extra: specbench[ray]
    ray = None

BATCH_S = 0.2  # a running task sends its events at least this often


def _job_task(job_data: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    """Runs in a Ray worker: ``run_job`` in a thread, its events yielded in batches."""
    from specbench.execution.worker import run_job

    job = EngineJob.model_validate(job_data)
    ctx = ray.get_runtime_context()
    placement = Placement(
        executor="ray", hostname=socket.gethostname(), node_id=ctx.get_node_id(),
        node_ip=ray.util.get_node_ip_address(), pid=os.getpid(),
        gpu_ids=[str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
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
        """On a multi-node cluster, every local model/speculator path must exist on every node."""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        paths = sorted({p for j in jobs for p in j.engine.local_paths()})
        if len(nodes) < 2 or not paths:
            return []
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        probe = ray.remote(num_cpus=0)(_missing_paths)
        refs = {n["NodeManagerAddress"]: probe.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(paths) for n in nodes}
        problems = []
        for node, ref in refs.items():
            for p in ray.get(ref, timeout=120):
                problems.append(f"{p}: not found on Ray node {node}; a local model or zoo path must be on "
                                "storage every node mounts at the same path (or use a hub id)")
        return problems

    # -- running --------------------------------------------------------------

    def _options(self, job: EngineJob, gpu_cluster: bool) -> dict[str, Any]:
        gpus = max(job.gpus, 1) if gpu_cluster else 0
        opts: dict[str, Any] = {"num_cpus": 1, "num_gpus": gpus, "max_retries": 0, "name": f"specbench:{job.job_id}"}
        if gpus > 1:
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            pg = placement_group([{"GPU": gpus, "CPU": 1}], strategy="STRICT_PACK")
            with self._lock:
                self._groups[job.job_id] = pg
            ray.get(pg.ready())
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
        return opts

    def _follow(self, job: EngineJob, gpu_cluster: bool, out: queue.Queue, slots: threading.Semaphore) -> None:
        """Submit one job, forward its events, and end it (with the reason when its worker died)."""
        error = None
        ended = False
        with slots:
            try:
                if self._stopping:
                    raise RuntimeError("the run was stopped before this job started")
                task = ray.remote(_job_task).options(num_returns="streaming", **self._options(job, gpu_cluster))
                gen = task.remote(job.model_dump(mode="json"))
                with self._lock:
                    self._running[job.job_id] = gen
                for ref in gen:
                    for data in ray.get(ref):
                        ev = parse_event(data)
                        if isinstance(ev, JobEnded):
                            ended = True
                            with self._lock:  # nothing left to cancel
                                self._running.pop(job.job_id, None)
                        out.put(ev)
                if not ended:
                    error = "the Ray task ended without finishing its job"
            except Exception as exc:  # noqa: BLE001 - a dead worker or node ends this job only
                if not ended:
                    first = (str(exc).strip().splitlines() or [""])[0][:300]
                    error = f"Ray worker or node died: {type(exc).__name__}: {first}"
            finally:
                with self._lock:
                    self._running.pop(job.job_id, None)
                    pg = self._groups.pop(job.job_id, None)
                if pg is not None:
                    ray.util.remove_placement_group(pg)
        if error is not None:
            out.put(JobEnded(job_id=job.job_id, error=error))

    def run(self, jobs: Sequence[EngineJob], emit: Callable[[Any], None]) -> None:
        jobs = [self._prepared(j) for j in jobs]
        gpu_cluster = cluster_has_gpus()
        slots = threading.Semaphore(self.max_parallel or len(jobs) or 1)
        out: queue.Queue = queue.Queue()
        threads = [threading.Thread(target=self._follow, args=(j, gpu_cluster, out, slots), daemon=True) for j in jobs]
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


def _missing_paths(paths: list[str]) -> list[str]:
    return [p for p in paths if not os.path.exists(p)]
