"""One job's engine kept up across speed rounds (specbench.execution.rounds, the headline's blocks).

It runs a cell's rounds one span at a time, tags each record with its round and engine instance, and sums each
cell's outcome over its rounds (a ``speed_only`` round of the headline adds nothing to it, and failing fails
only itself).
"""

from __future__ import annotations

import time

from specbench.engines.protocol import CellFailed, Engine
from specbench.execution.jobs import CellDone, CellStarted, CellWork, RequestDone
from specbench.execution.worker import _Job, now_iso
from specbench.results.records import CellRecord, RequestRecord
from specbench.results.requests import CellOutcome


class ResidentEngine:
    """One job's engine kept up across rounds, with each cell's outcome summed over its rounds."""

    def __init__(self, runner: _Job, engine: Engine):
        self.runner, self.engine = runner, engine
        self.dead: str | None = None
        self.outcomes: dict[str, CellOutcome] = {}
        self.failed: set[str] = set()
        self.started: dict[str, str] = {}
        self.round_t0: dict[tuple[str, int], float] = {}  # when each cell's round sent its first batch
        self.instance: int | None = None  # the engine instance its records carry (a run with headline blocks)

    def run_round(self, work: CellWork, span: tuple[int, int], r: int, speed_only: bool = False) -> None:
        """Run ``span`` of a cell's prompts as round ``r``; a ``speed_only`` round (the headline's, on a repeat
        of the prompts) adds nothing to the cell's outcome, which is the single pass's."""
        job, req = self.runner.job, work.request
        cid = req.cell.cell_id
        if cid in self.failed or (self.dead is not None and speed_only):
            return
        if self.dead is not None:
            self._fail(work, self.dead, None)
            return
        if cid not in self.started and not speed_only:
            self.started[cid] = now_iso()
            self.runner.emit(CellStarted(job_id=job.job_id, cell_id=cid, prompts=len(req.prompts)))

        # A server's send times count from the cell's round, not from this batch of it: the batches of a
        # round are seconds apart (other engines run between them), and the step model reads who overlapped.
        shift = time.perf_counter() - self.round_t0.setdefault((cid, r), time.perf_counter())

        def on_record(rec: RequestRecord) -> None:
            update: dict = {"round": r, "instance": self.instance, "speed_only": speed_only}
            if rec.sent_offset_s is not None:
                update["sent_offset_s"] = rec.sent_offset_s + shift
            self.runner.emit(RequestDone(job_id=job.job_id, record=rec.model_copy(update=update)))

        part = req.model_copy(update={"prompts": req.prompts[span[0]:span[1]]})
        try:
            out = self.engine.run_cell(part, on_record)
        except CellFailed as exc:
            if speed_only:  # the cell is done (its single pass): a headline speed round fails alone, not the cell
                self.failed.add(cid)
            else:
                self._fail(work, f"round {r}: {exc.reason}", exc.log_tail)
            if exc.engine_dead:
                self.dead = f"the engine died in round {r} ({exc.reason}); not restarted between rounds"
            return
        if speed_only:
            return
        prev = self.outcomes.get(cid)
        walls = list(prev.round_wall_s or []) if prev is not None else []
        walls += [0.0] * (r + 1 - len(walls))
        walls[r] += out.wall_time_s  # a round's batches of this cell, each timed by its engine
        if prev is not None:
            counters = out.counters if prev.counters is None else (
                prev.counters if out.counters is None else prev.counters + out.counters)
            phases = out.step_phases if prev.step_phases is None else (
                prev.step_phases if out.step_phases is None else prev.step_phases + out.step_phases)
            out = CellOutcome(counters=counters, wall_time_s=prev.wall_time_s + out.wall_time_s,
                              num_requests=prev.num_requests + out.num_requests, step_phases=phases)
        self.outcomes[cid] = out.model_copy(update={"round_wall_s": walls})

    def _fail(self, work: CellWork, reason: str, log_tail: str | None) -> None:
        job, cid = self.runner.job, work.request.cell.cell_id
        self.failed.add(cid)
        self.runner.emit(CellDone(job_id=job.job_id, record=CellRecord(
            run_id=job.run_id, cell_id=cid, engine_key=job.engine.config.key, status="failed", reason=reason,
            engine_log_tail=log_tail, started_at=self.started.get(cid), finished_at=now_iso(),
        )))
