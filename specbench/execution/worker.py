"""Runs one :class:`~specbench.execution.jobs.EngineJob` wherever an executor placed it.

Start the engine, warm it up, run its cells (or teacher-force its items) and
apply the restart-once policy: an engine that dies mid-cell fails that cell
and is started again for the cells left; a second death fails the rest. Every
outcome is an event passed to ``emit``; nothing here writes run files.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specbench.analysis.cell_stopper import CellStopper
from specbench.config.methods import get_method
from specbench.engines.factory import make_engine
from specbench.engines.kept import KeptEngines, engine_identity
from specbench.engines.protocol import CellFailed, Engine, EngineUnavailable
from specbench.engines.vllm_offline import settle_zygotes
from specbench.execution.conversations import run_conversations
from specbench.execution.jobs import (
    CellDone,
    CellStarted,
    CellWork,
    EngineJob,
    EngineState,
    Event,
    JobEnded,
    PhaseTimed,
    Placement,
    RequestDone,
    ScoresDone,
    wall_now,
)
from specbench.results import rundir
from specbench.results.records import CellRecord, RequestRecord, now_iso
from specbench.results.requests import (
    CellOutcome,
    CellRequest,
    ScoreItem,
    ScoreResult,
    ScoreRow,
    is_conversations,
)
from specbench.zoo.draft_attention import checkpoint_block_attention

Emit = Callable[[Event], None]


def local_placement(executor: str = "local") -> Placement:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return Placement(
        executor=executor, hostname=socket.gethostname(), pid=os.getpid(),
        gpu_ids=[g for g in visible.split(",") if g] if visible else [],
    )


FollowUp = Callable[[EngineJob], list[ScoreItem]]


class _Job:
    def __init__(self, job: EngineJob, emit: Emit, placement: Placement, follow_up: FollowUp | None = None,
                 kept: KeptEngines | None = None):
        self.job = job
        self.emit = emit
        self.placement = placement
        self.follow_up = follow_up
        self.kept = kept
        self.identity = engine_identity(job.engine, job.load) if kept is not None else ""
        self.first_log = str(rundir.engine_log(job.run_dir, job.engine.config.key))

    def _phase(self, phase: str, start: float) -> None:
        self.emit(PhaseTimed(job_id=self.job.job_id, phase=phase, start=start, end=wall_now(), gpus=self.job.gpus))

    def start(self) -> Engine:
        """Start the engine (raises :class:`EngineUnavailable`, marked skipped when the
        method cannot run on this platform by design)."""
        job = self.job
        held = self.kept.take(self.identity) if self.kept is not None else None
        if held is not None:
            return self.take_over(*held)
        engine = make_engine(job.engine, Path(job.run_dir), job.load, prepare_next=job.offline_engine_follows)
        self.emit(EngineState(job_id=job.job_id, state="starting", placement=self.placement))
        t0 = wall_now()
        try:
            engine.start()
        except EngineUnavailable as exc:
            info = get_method(job.engine.config.method.method)
            if info.platforms and job.platform not in info.platforms:
                exc.skipped = True
                if info.platform_note and info.platform_note not in exc.reason:
                    exc.reason = f"{exc.reason} ({info.platform_note})"
            raise
        finally:
            self._phase("engine_start", t0)
        self.announce(engine.describe())
        return engine

    def restart(self, engine: Engine) -> Engine:
        """A fresh instance of the job's engine (the headline's speed blocks): ``engine`` is closed, never kept
        for a later run, and another started and prepared to measure (raises :class:`EngineUnavailable`)."""
        self.emit(EngineState(job_id=self.job.job_id, state="restarting", reason="a fresh engine instance",
                              placement=self.placement))
        t0 = wall_now()
        engine.close()
        self._phase("engine_close", t0)
        kept, self.kept = self.kept, None  # a kept engine of this identity would be this one again
        try:
            fresh = self.start()
        finally:
            self.kept = kept
        self.prepare_to_measure(fresh)
        return fresh

    def take_over(self, engine: Engine, first_log: str) -> Engine:
        """A kept engine with this job's identity serves it: no start; its log stays where it was
        started, this run's engine log says where, and the manifest's entry says ``kept_from``."""
        job = self.job
        self.emit(EngineState(job_id=job.job_id, state="starting", placement=self.placement))
        t0 = wall_now()
        engine.config = job.engine.config
        log = rundir.engine_log(job.run_dir, job.engine.config.key)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"specbench: engine kept running from an earlier run in this process; its log: {first_log}\n")
        self.first_log = first_log
        self._phase("engine_start", t0)
        self.announce({**engine.describe(), "kept_from": first_log})
        return engine

    def announce(self, describe: dict) -> None:
        """The engine is up: its description (with how a DFlash draft block is served) for the manifest."""
        job = self.job
        if job.engine.config.target.engine != "reference" and job.kind == "cells":
            # How vLLM will serve a DFlash draft block vs how it was trained (the cross-check reports it).
            attention = checkpoint_block_attention(job.engine.speculator_path)
            if attention is not None:
                describe["draft_attention"] = attention
        self.emit(EngineState(job_id=job.job_id, state="started", describe=describe, placement=self.placement))

    def fail_cells(self, cells: list[CellWork], exc: EngineUnavailable) -> None:
        status = "skipped" if exc.skipped else "failed"
        for w in cells:
            self.emit(CellDone(job_id=self.job.job_id, record=CellRecord(
                run_id=self.job.run_id, cell_id=w.request.cell.cell_id, engine_key=self.job.engine.config.key,
                status=status, reason=exc.reason, engine_log_tail=exc.log_tail, finished_at=now_iso(),
            )))

    def run_cells(self) -> None:
        job = self.job
        try:
            engine = self.start()
        except EngineUnavailable as exc:
            self.emit(EngineState(job_id=job.job_id, state="skipped" if exc.skipped else "failed",
                                  reason=exc.reason, log_tail=exc.log_tail, placement=self.placement))
            self.fail_cells(job.cells, exc)
            return
        restarts = 0
        try:
            self.prepare_to_measure(engine)
            t0 = wall_now()
            for i, work in enumerate(job.cells):
                alive = self.run_cell(engine, work)
                if alive or i + 1 == len(job.cells):
                    continue
                engine.close()
                left = job.cells[i + 1 :]
                if restarts >= job.max_restarts:
                    self.fail_cells(left, EngineUnavailable("engine died twice; not restarted again"))
                    return
                restarts += 1
                self.emit(EngineState(job_id=job.job_id, state="restarting", reason="engine died mid-cell"))
                self._phase("cells", t0)
                try:
                    engine = self.start()
                except EngineUnavailable as exc:
                    self.fail_cells(left, exc)
                    return
                t0 = wall_now()
            self._phase("cells", t0)
            if job.teacher_forcing_after and self.follow_up is not None:
                # The target's plain engine is up: it teacher-forces the target's sampled outputs now.
                items = self.follow_up(job)
                if items:
                    engine = self.score(engine, items)
        except BaseException:
            engine.kill()  # stopping (a signal, a cancelled task): no graceful shutdown
            raise
        finally:
            self.close(engine)

    def close(self, engine: Engine) -> None:
        # What the engine found while serving (a server's checks of what it serves) goes to the driver by value,
        # as everything crosses to it (an executor may run this worker in another process).
        final = engine.describe()
        t0 = wall_now()
        if self.kept is None or not self.kept.keep(self.identity, engine, self.first_log):
            engine.close()
        self._phase("engine_close", t0)
        self.emit(EngineState(job_id=self.job.job_id, state="closed", describe=final))

    def warmup(self, engine: Engine) -> None:
        """Unrecorded requests in the shape of each load the engine will see (the driver built them)."""
        for req in self.job.warmup:
            try:
                engine.run_cell(req, lambda r: None)
            except CellFailed:
                return  # the first real cell reports the problem

    def prepare_to_measure(self, engine: Engine) -> None:
        """The warmup, then a zygote importing vLLM for the next engines (seconds of CPU, started
        with this engine) finishes first: it never shares the CPU with measured cells. Timed as
        the warmup phase."""
        t0 = wall_now()
        if self.job.warmup:
            self.warmup(engine)
        waited = settle_zygotes()
        if self.job.warmup or waited > 0.05:
            self._phase("warmup", t0)

    def run_cell(self, engine: Engine, work: CellWork) -> bool:
        """Run one cell; False when the engine died (a restart is needed)."""
        job, req = self.job, work.request
        cell = req.cell
        started = now_iso()
        self.emit(CellStarted(job_id=job.job_id, cell_id=cell.cell_id, prompts=len(req.prompts)))
        received = 0
        replayed = {p.prompt_id: p.turn for p in req.prompts if p.turn is not None}  # replay: recorded

        def on_record(rec: RequestRecord) -> None:
            nonlocal received
            received += 1
            if rec.prompt_id in replayed:
                rec = rec.model_copy(update={"turn": replayed[rec.prompt_id]})
            self.emit(RequestDone(job_id=job.job_id, record=rec))

        stopper = None
        try:
            if is_conversations(req.prompts):
                if cell.stop is not None:
                    raise CellFailed("stop rules do not apply to conversations run turn by turn")
                outcome = run_conversations(engine, req, on_record)
            elif cell.stop is None:
                outcome = engine.run_cell(req, on_record)
            else:
                stopper, outcome = self.run_stopping(engine, work, on_record)
        except CellFailed as exc:
            self.emit(CellDone(job_id=job.job_id, record=CellRecord(
                run_id=job.run_id, cell_id=cell.cell_id, engine_key=job.engine.config.key, status="failed",
                reason=exc.reason, engine_log_tail=exc.log_tail, num_requests=received,
                started_at=started, finished_at=now_iso(),
            )))
            return not exc.engine_dead
        self.cell_done(work, outcome, started, stopper)
        return True

    def cell_done(self, work: CellWork, outcome: CellOutcome, started: str, stopper: CellStopper | None = None) -> None:
        """The cell's ``ok`` record: its outcome with what an earlier attempt recorded (``--resume``)."""
        job, cell = self.job, work.request.cell
        counters = outcome.counters
        reason = None
        if work.earlier_requests:
            reason = f"resumed: {work.earlier_requests} requests from an earlier attempt"
            if counters is not None:
                if all(p is not None for p in work.earlier_counters):
                    counters = sum((p for p in work.earlier_counters if p is not None), counters)
                else:
                    reason += "; their counters are unknown, pooled counters cover the new requests only"
        self.emit(CellDone(job_id=job.job_id, record=CellRecord(
            run_id=job.run_id, cell_id=cell.cell_id, engine_key=job.engine.config.key, status="ok", reason=reason,
            counters=counters, num_requests=work.earlier_requests + outcome.num_requests,
            wall_time_s=outcome.wall_time_s, started_at=started, finished_at=now_iso(),
            stop=None if stopper is None else stopper.record(), round_wall_s=outcome.round_wall_s,
            step_phases=outcome.step_phases,
        )))

    def run_stopping(self, engine: Engine, work: CellWork, on_record: Callable[[RequestRecord], None]
                     ) -> tuple[CellStopper, CellOutcome]:
        """Run the cell's prompts in its seeded order, block by block, until its stop rule is met."""
        req = work.request
        cell = req.cell
        assert cell.stop is not None
        stopper = CellStopper(cell.stop, req.prompts, seed=work.order_seed, speculative=cell.k is not None,
                              paired=work.paired, dataset_kind=work.dataset_kind, earlier=work.earlier_records)

        def collect(rec: RequestRecord) -> None:
            stopper.records.append(rec)
            on_record(rec)

        counters, wall, n = None, 0.0, 0
        for start, end in stopper.blocks():
            block = req.model_copy(update={"prompts": stopper.prompts[start:end]})
            out = engine.run_cell(block, collect)
            if out.counters is not None:
                counters = out.counters if counters is None else counters + out.counters
            wall += out.wall_time_s
            n += out.num_requests
            if stopper.check(end):
                break
        return stopper, CellOutcome(counters=counters, wall_time_s=wall, num_requests=n)

    def teacher_force(self) -> None:
        """Score sampled outputs under the plain target (its own engine); failures become error rows."""
        job = self.job
        try:
            engine = self.start()
        except EngineUnavailable as exc:
            self.emit(EngineState(job_id=job.job_id, state="failed", reason=exc.reason, placement=self.placement))
            self.emit(ScoresDone(job_id=job.job_id, done=0, total=len(job.score_items), rows=[
                ScoreRow(target=job.engine.config.target.name, error=f"teacher-forcing engine did not start: {exc.reason}")
            ]))
            return
        try:
            engine = self.score(engine, job.score_items)
        except BaseException:
            engine.kill()
            raise
        finally:
            self.close(engine)

    def score(self, engine: Engine, items: list[ScoreItem]) -> Engine:
        """Teacher-force ``items`` in batches on ``engine`` (restarted once it died); returns the engine in use."""
        from specbench.execution.teacher_forcing import score_rows

        job = self.job
        t0 = wall_now()
        try:
            for i in range(0, len(items), job.score_batch):
                batch = items[i : i + job.score_batch]
                try:
                    rows = score_rows(batch, engine.score(batch))
                except CellFailed as exc:
                    rows = score_rows(batch, [ScoreResult(error=exc.reason)] * len(batch))
                    if not engine.alive:
                        engine.close()
                        engine = self.start()
                self.emit(ScoresDone(job_id=job.job_id, rows=rows, done=min(i + len(batch), len(items)),
                                     total=len(items)))
        finally:
            self._phase("teacher_forcing", t0)
        return engine


@contextmanager
def engines_ended(residents: Mapping[str, Any]) -> Iterator[None]:
    """Every engine of ``residents`` (objects with ``engine`` and ``runner``, as the dict holds them when the
    block ends) closed by its runner at the end; killed first when a stop signal or a bug ends the block."""
    try:
        yield
    except BaseException:
        for res in residents.values():
            res.engine.kill()
        raise
    finally:
        for res in residents.values():
            res.runner.close(res.engine)


def run_job(job: EngineJob, emit: Emit, placement: Placement | None = None, follow_up: FollowUp | None = None,
            kept: KeptEngines | None = None) -> None:
    """Run ``job`` to its end, emitting events; the last one is :class:`JobEnded`.

    ``follow_up`` (the local executor's driver): the items to teacher-force on a
    job's engine after its cells, for a job marked ``teacher_forcing_after``.

    A :class:`BaseException` (a stop signal, a cancelled task) propagates after the
    engine was killed; an unexpected error ends the job with its reason.

    ``kept``: engines kept between runs in this process (:mod:`specbench.engines.kept`): the job
    takes one with its identity instead of starting one, and leaves its engine there when done.
    """
    runner = _Job(job, emit, placement or local_placement(), follow_up, kept)
    try:
        if job.kind == "cells":
            runner.run_cells()
        else:
            runner.teacher_force()
    except Exception as exc:  # noqa: BLE001 - the driver fails what this job left unfinished
        emit(JobEnded(job_id=job.job_id, error=f"{type(exc).__name__}: {exc}"))
        return
    emit(JobEnded(job_id=job.job_id))


def warmup_requests(cells: list[CellRequest]) -> list[CellRequest]:
    """One short unrecorded request batch per (load, sampled?, logprobs) shape the engine
    will see: CPU kernels and the logprobs path are prepared on first use, which would
    otherwise be timed in the first cell. A request-rate cell warms up closed-loop at
    its cap (1 stream when uncapped). Two verification steps are enough to prepare a
    step (2·(K+1) tokens; 4 without speculation). A conversation warms up as its first turn."""
    shapes: dict[tuple[int, bool, int | None], CellRequest] = {}
    for r in cells:
        shapes.setdefault((max(1, r.cell.batch_size), r.cell.temperature > 0, r.sampling.logprobs), r)
    out = []
    for (bs, _, _), r in shapes.items():
        tokens = 2 * (r.cell.k + 1) if r.cell.k else 4
        out.append(CellRequest(
            run_id=r.run_id,
            cell=r.cell.model_copy(update={"cell_id": f"warmup-b{bs}", "batch_size": bs, "request_rate": None}),
            prompts=[p.model_copy(update={"later_turns": None}) for p in r.prompts[:bs]],  # single requests
            sampling=r.sampling.model_copy(update={"max_tokens": tokens, "samples_per_prompt": 1}),
        ))
    return out
