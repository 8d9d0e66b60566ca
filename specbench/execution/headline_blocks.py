"""The headline's speed blocks (issue 51): rounds until each headline pair is decided, on fresh engine instances.

After a target's single pass in rounds (specbench.execution.rounds), a suite with ``headline:``
(:class:`~specbench.config.suite_models.HeadlineSpeedSpec`) goes on in blocks. Before each block the
headline's rule is applied to every pair from the records so far
(:func:`~specbench.analysis.headline_rounds.open_headline_cells`, the same code the report's headline runs);
the engines of the cells still open are closed and started again (a fresh instance: its offset becomes
spread between blocks, which the rule's unit, the block, contains), and run ``rounds_per_instance`` speed
rounds: in each, every open cell of a slot (same prompts and load) runs ``batches_per_round`` batches of a
repeat of its prompts (rotating through them round by round), the slot's engines alternating by batch
(A B | B A …). Those records are ``speed_only`` (numbered on after the single pass's rounds, tagged with
their instance): the cell's outcome, τ and accuracy stay the single pass's. The blocks end when every pair
is decided or out of the cap's reach (:func:`~specbench.analysis.headline_rounds.out_of_reach`), after
``instances`` instances in all, or once ``budget_s`` is spent (a block started is finished). The engines of a
pair decided or out of reach are not restarted again.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence

from specbench.analysis.headline_rounds import open_headline_cells
from specbench.analysis.method_comparison import HEADLINE_RULE
from specbench.config.arms import arm_of
from specbench.config.plan import Cell, prompts_per_batch, round_order
from specbench.config.suite_models import HeadlineSpeedSpec
from specbench.engines.protocol import CellFailed
from specbench.execution.engine_turns import Turns
from specbench.execution.jobs import CellWork, EngineJob, wall_now
from specbench.execution.resident_engine import ResidentEngine
from specbench.execution.round_schedule import batch_order, interleave_unit, slot_of
from specbench.execution.worker import engines_ended
from specbench.results.records import RequestRecord


class HeadlineBlocks:
    """One resident set's headline blocks: its cells, the records so far and the decisions' log."""

    def __init__(self, spec: HeadlineSpeedSpec, reference: str, cells: Sequence[Cell],
                 earlier: Sequence[RequestRecord], seed: int):
        self.spec, self.reference, self.cells, self.seed = spec, reference, list(cells), seed
        self.records: list[RequestRecord] = list(earlier)  # every round's records: the decisions read them
        self.next_instance = 1 + max((r.instance or 0 for r in earlier), default=-1)
        self.log: list[str] = []

    @classmethod
    def for_jobs(cls, jobs: Sequence[EngineJob]) -> HeadlineBlocks | None:
        """The blocks of one target's jobs when they ask for them (an A/B run decides its own way: none)."""
        if not jobs or jobs[0].headline is None or jobs[0].headline_reference is None:
            return None
        if any(arm_of(j.engine.config.target.name) for j in jobs):
            return None
        cells = [w.request.cell for j in jobs for w in j.cells]
        return cls(jobs[0].headline, jobs[0].headline_reference, cells, [r for j in jobs for r in j.round_records],
                   jobs[0].round_seed)

    def open_cells(self) -> set[str]:
        by_cell: dict[str, list[RequestRecord]] = defaultdict(list)
        for r in self.records:
            by_cell[r.cell_id].append(r)
        targets = {c.target for c in self.cells}
        return open_headline_cells(self.cells, by_cell, {t: self.reference for t in targets}, HEADLINE_RULE,
                                   cap=self.spec.instances)

    def run(self, jobs: Sequence[EngineJob], cap: int, start: Callable[[EngineJob], ResidentEngine | None]) -> None:
        """Blocks until every pair is decided, the instances are spent or the budget is. Each block starts the
        engines of the open cells afresh (``start``), all together when ``cap`` engines fit, else the reference
        with one method at a time, and closes them after its rounds."""
        t0 = time.monotonic()
        next_round = max([1, *(r.round + 1 for r in self.records if r.round is not None)])
        while self.next_instance < self.spec.instances:
            still = self.open_cells()
            if not still:
                self.log.append(f"every headline pair decided or out of reach after {self.next_instance} instance(s)")
                return
            if self.spec.budget_s is not None and time.monotonic() - t0 >= self.spec.budget_s:
                self.log.append(f"budget of {self.spec.budget_s:.0f} s spent: {len(still)} cell(s) undecided")
                return
            instance, self.next_instance = self.next_instance, self.next_instance + 1
            for chunk in self._chunks([j for j in jobs if any(c in still for c in j.cell_ids)], cap):
                self._block(chunk, still, instance, next_round, start, Turns() if len(chunk) > cap else None)
            next_round += self.spec.rounds_per_instance
            self.log.append(f"instance {instance}: {len(still)} open cell(s) ({time.monotonic() - t0:.0f} s)")
        self.log.append(f"{self.spec.instances} instances run; undecided pairs stay so")

    def _chunks(self, needed: list[EngineJob], cap: int) -> list[list[EngineJob]]:
        """The engines a block starts together: all when they fit, else the reference's with as many methods'
        as fit beside them (at least one: a pair that does not fit takes turns), chunk after chunk. Each chunk
        restarts the reference's engines, so packing them full starts the fewest."""
        if len(needed) <= cap:
            return [needed]
        refs = [j for j in needed if j.engine.config.method.label == self.reference
                or any(c.method_family == self.reference for c in (w.request.cell for w in j.cells))]
        others = [j for j in needed if j not in refs]
        per = max(1, cap - len(refs))
        return [[*refs, *others[i:i + per]] for i in range(0, len(others), per)] or [refs]

    def _block(self, chunk: list[EngineJob], still: set[str], instance: int, first_round: int,
               start: Callable[[EngineJob], ResidentEngine | None], turns: Turns | None) -> None:
        """One instance of ``chunk``'s engines and its rounds; with ``turns`` (a pair that does not fit on the GPU
        together, started with sleep mode) each engine sleeps once started and wakes for its batches."""
        up: dict[str, ResidentEngine] = {}
        with engines_ended(up):
            for job in chunk:
                res = start(job)
                if res is None:
                    continue
                res.instance = instance
                up[job.job_id] = res
                if turns is not None:
                    try:
                        turns.join(job.job_id, res.engine)
                    except CellFailed as exc:
                        del up[job.job_id]
                        res.engine.kill()
                        self.log.append(f"{job.job_id}: vLLM's sleep mode: {exc.reason}; left out of instance "
                                        f"{instance}")
            works = {k: [w for w in res.runner.job.cells if w.request.cell.cell_id in still] for k, res in up.items()}
            for j in range(self.spec.rounds_per_instance):
                self._round(up, works, first_round + j, turns)

    def _round(self, up: dict[str, ResidentEngine], works: dict[str, list[CellWork]], r: int,
               turns: Turns | None = None) -> None:
        """One speed round: per slot, its open cells on a repeat of the prompts, alternating by batch."""
        slots: dict[tuple, list[tuple[str, CellWork]]] = defaultdict(list)
        for key in round_order(list(works), r, self.seed):
            for w in works[key]:
                slots[slot_of(w)].append((key, w))
        for members in slots.values():
            w0 = members[0][1]
            unit = prompts_per_batch(w0.request.cell.batch_size, w0.request.sampling.samples_per_prompt)
            parts = [(key, _repeat_part(w, r, self.spec.batches_per_round * unit)) for key, w in members]
            size = len(parts[0][1].request.prompts)
            step = interleave_unit((0, size), unit, w0.request.cell.request_rate)
            for chunk, order in batch_order((0, size), step, len(parts)):
                for o in order:
                    key, part = parts[o]
                    if turns is not None:  # its turn: the awake one sleeps, this one wakes (a batch untimed)
                        turns.switch(key, up, (part, chunk, r))
                    t0 = wall_now()
                    up[key].run_round(part, chunk, r, speed_only=True)
                    up[key].runner._phase("cells", t0)


def _repeat_part(work: CellWork, r: int, size: int) -> CellWork:
    """``size`` of the cell's prompts for speed round ``r``, rotating through them (none skipped)."""
    prompts = work.request.prompts
    n = len(prompts)
    chosen = [prompts[(r * size + i) % n] for i in range(min(size, n))] if n else []
    return work.model_copy(update={"request": work.request.model_copy(update={"prompts": chosen, "skip": set()})})
