"""Speed rounds: a target's engines resident together, alternating round by round (issue 22).

With ``rounds: R`` (the plan's :attr:`~specbench.config.plan.Plan.rounds`), each cell's prompts
are split into R contiguous rounds (:func:`~specbench.config.plan.round_spans`: the same prompts
and batches as one go). The engines of one target start once and stay up; in round r the cells
that are compared with each other (one :func:`slot_of`: the same prompts and load) run together,
their batches alternating between the slot's engines (:func:`batch_order`), in a seeded order
balanced over pairs of rounds (:func:`~specbench.config.plan.round_order`). A method's round r and
the baseline's round r are then measured seconds apart, and the analysis pairs them (records
carry ``round``).

Resident set: a vLLM CPU engine holds its KV cache space (``VLLM_CPU_KVCACHE_SPACE`` GiB) plus
about 1 GiB (weights of a small model, the worker); on a GPU each holds its
``gpu_memory_utilization`` share (0.9 by default, so one). :func:`resident_cap` is how many fit
in the memory free now; a target with more engines runs them in resident sets of that size
(the baseline in the first), each set interleaved on its own. An engine that dies is not
restarted in a round: its cells' later rounds fail with the reason. An A/B pair that does not fit
on one GPU together takes turns with vLLM's sleep mode instead (:class:`Turns`): one arm's cells of
a round, then the other's, the first batch after each wake-up untimed.

Cells with a stop rule (tau or accuracy: speed stop rules and rounds are exclusive, see the suite
check) run whole after the rounds, on the engine still up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from specbench.config.arms import VLLM_DEFAULT_GPU_SHARE, arm_of, base_target
from specbench.config.plan import prompts_per_batch, round_order, round_spans
from specbench.engines.kept import KeptEngines
from specbench.engines.procs import available_gib
from specbench.engines.protocol import CellFailed, EngineUnavailable
from specbench.engines.vllm_offline import settle_zygotes
from specbench.execution.engine_turns import Turns
from specbench.execution.headline_blocks import HeadlineBlocks
from specbench.execution.jobs import (
    CellWork,
    EngineJob,
    EngineState,
    Event,
    Placement,
    RequestDone,
    wall_now,
)
from specbench.execution.resident_engine import ResidentEngine
from specbench.execution.round_schedule import ab_round_order, batch_order, interleave_unit, slot_of
from specbench.execution.worker import Emit, FollowUp, _Job, engines_ended, now_iso
from specbench.results.records import RequestRecord
from specbench.results.requests import CellOutcome

ENGINE_OVERHEAD_GIB = 1.0  # a vLLM CPU engine beside its KV cache (measured: docs/measurements.md, Speed rounds)
RESIDENT_MEMORY_SHARE = 0.8  # of the free memory, what resident CPU engines may take together


def engine_gib(job: EngineJob) -> float:
    """Host memory one resident CPU engine holds (its KV cache space plus the overhead)."""
    return float(job.engine.env.get("VLLM_CPU_KVCACHE_SPACE", "1") or 1) + ENGINE_OVERHEAD_GIB


def resident_cap(jobs: Sequence[EngineJob], free_gib: float, gpu_fraction: float = 1.0) -> int:
    """How many of ``jobs``' engines may be up together: on CPU, 80 % of the free memory over the
    largest engine's footprint; on a GPU, engines whose memory shares sum to at most 1."""
    if not jobs:
        return 1
    if jobs[0].platform == "cpu":
        return max(1, math.floor(RESIDENT_MEMORY_SHARE * free_gib / max(engine_gib(j) for j in jobs)))
    share = max(float(j.engine.engine_kwargs.get("gpu_memory_utilization", VLLM_DEFAULT_GPU_SHARE)) for j in jobs)
    return max(1, math.floor(gpu_fraction / share))


def pair_key(job: EngineJob) -> str:
    """The engine a job's engine is in every arm of an A/B run (its key with the arm left out)."""
    t = job.engine.config.target.name
    return job.engine.config.key.replace(t, base_target(t), 1)


def resident_sets(jobs: Sequence[EngineJob], cap: int) -> list[list[EngineJob]]:
    """``jobs`` (one target's) in sets of at most ``cap``, the baseline's job in the first; in the last
    when it teacher-forces the target's outputs after its cells (every other set must be done by then).
    In an A/B run an engine and its counterpart in the other arm are always in the same set."""
    ab = any(arm_of(j.engine.config.target.name) for j in jobs)
    ordered = sorted(jobs, key=lambda j: (j.engine.config.method.method != "baseline", pair_key(j) if ab else ""))
    if ab:
        cap = max(2, cap - cap % 2)
    sets = [list(ordered[i:i + cap]) for i in range(0, len(ordered), max(1, cap))]
    return sets[::-1] if any(j.teacher_forcing_after for j in jobs) else sets


#: Called after each round with the round's index and its request records; returns the cells that
#: need no more rounds (an A/B run's decided groups: specbench.execution.ab_round_decisions).
RoundHook = Callable[[int, list[RequestRecord]], set[str]]


def run_interleaved(jobs: Sequence[EngineJob], emit: Emit, placement: Placement,
                    follow_up: FollowUp | None = None, free_gib: float | None = None,
                    kept: KeptEngines | None = None, round_hook: RoundHook | None = None) -> None:
    """Run one target's cell jobs (their ``rounds`` and ``round_seed``) in interleaved rounds (an A/B
    run: both arms' jobs of one target, pairs resident together)."""
    cap = resident_cap(jobs, available_gib() if free_gib is None else free_gib)
    blocks = HeadlineBlocks.for_jobs(jobs) if round_hook is None else None
    first = blocks.next_instance if blocks is not None else 0
    for group in resident_sets(jobs, cap):
        _run_set(group, group[0].rounds, group[0].round_seed, emit, placement, follow_up, kept, round_hook, blocks,
                 first)
    if blocks is not None:
        def collect(ev: Event) -> None:  # the blocks' records, kept for their decisions
            if isinstance(ev, RequestDone):
                blocks.records.append(ev.record)
            emit(ev)

        blocks.run(jobs, cap, lambda job: _start_fresh(job, collect, placement))


def _start_fresh(job: EngineJob, emit: Emit, placement: Placement) -> ResidentEngine | None:
    """A fresh instance of ``job``'s engine for the headline's speed blocks (never a kept one), prepared to
    measure (counted as a restart in the manifest); None when it does not start: its cells are done, the
    block goes on without it (the reason is in the engine's log)."""
    runner = _Job(job, emit, placement)
    emit(EngineState(job_id=job.job_id, state="restarting", reason="a fresh engine instance", placement=placement))
    try:
        engine = runner.start()
    except EngineUnavailable:
        return None
    try:
        runner.prepare_to_measure(engine)
    except BaseException:
        engine.kill()
        raise
    return ResidentEngine(runner, engine)


def _run_set(group: list[EngineJob], rounds: int, seed: int, emit: Emit, placement: Placement,
             follow_up: FollowUp | None, kept: KeptEngines | None, round_hook: RoundHook | None = None,
             blocks: HeadlineBlocks | None = None, base: int = 0) -> None:
    up: dict[str, ResidentEngine] = {}
    turns = Turns()
    finished: set[str] = set()  # cells the hook needs no more rounds of
    this_round: list[RequestRecord] = []
    if round_hook is not None or blocks is not None:
        inner_emit = emit

        def emit(ev: Event) -> None:  # noqa: F811 - the round's records, kept for the hooks
            if isinstance(ev, RequestDone):
                this_round.append(ev.record)
                if blocks is not None:
                    blocks.records.append(ev.record)
            inner_emit(ev)
    with engines_ended(up):
        for job in group:
            _start_resident(job, emit, placement, follow_up, kept, up, turns)
        keys = list(up)
        # A later start may have left a zygote importing vLLM (one that failed to start has no
        # warmup that waits for it): it is done before the first measured round.
        t0 = wall_now()
        if settle_zygotes() > 0.05 and keys:
            up[keys[-1]].runner._phase("warmup", t0)
        per_block = -(-rounds // max(1, group[0].instances))  # rounds per engine instance
        _number(up, base if blocks is not None or group[0].instances > 1 else None)
        arms = {k: arm_of(up[k].runner.job.engine.config.target.name) or "" for k in keys}
        pairs = {k: pair_key(up[k].runner.job) for k in keys}
        measured = {w.request.cell.cell_id for k in keys for w in up[k].runner.job.cells if w.request.cell.stop is None}
        for r in range(rounds):
            if r and r % per_block == 0:  # a new block of rounds on fresh engine instances
                _fresh_instances(up, turns, base + r // per_block, unfinished={
                    k for k in keys if any(w.request.cell.cell_id not in finished for w in up[k].runner.job.cells)})
            order = ab_round_order(keys, pairs, arms, r, seed) if any(arms.values()) else round_order(keys, r, seed)
            this_round.clear()
            for step in _round_steps(up, order, arms, pairs, turns):
                runs = _step_runs(up, step, r, rounds, finished)
                for key, work, span in runs:
                    t0 = wall_now()
                    if work.request.cell.cell_id not in up[key].failed and turns.switch(key, up, (work, span, r)):
                        up[key].runner._phase("warmup", t0)
                        t0 = wall_now()
                    up[key].run_round(work, span, r)
                    up[key].runner._phase("cells", t0)
            if round_hook is not None:
                finished |= round_hook(r, list(this_round))
                if measured <= finished:
                    break
        if blocks is not None:
            blocks.next_instance = max(blocks.next_instance, base + 1 + (rounds - 1) // per_block)
        _finish_set(up, keys, turns, follow_up)


def _number(up: dict[str, ResidentEngine], instance: int | None) -> None:
    for res in up.values():
        res.instance = instance


def _fresh_instances(up: dict[str, ResidentEngine], turns: Turns, instance: int, unfinished: set[str]) -> None:
    """Every live engine with cells left closed and started afresh (the suite's ``instances``): the rounds that
    follow are instance ``instance``'s. An engine that does not start again is dead: its later rounds fail."""
    for key, res in up.items():
        if res.dead is not None or key not in unfinished:
            continue
        try:
            res.engine = res.runner.restart(res.engine)
        except EngineUnavailable as exc:
            res.dead = f"a fresh engine instance did not start: {exc.reason}"
            continue
        res.instance = instance
        if key in turns.members:  # a fresh engine is awake: it takes its turns from asleep again
            turns.members.discard(key)
            if turns.awake == key:
                turns.awake = None
            try:
                turns.join(key, res.engine)
            except CellFailed as exc:
                res.dead = f"vLLM's sleep mode: {exc.reason}"


def _start_resident(job: EngineJob, emit: Emit, placement: Placement, follow_up: FollowUp | None,
                    kept: KeptEngines | None, up: dict[str, ResidentEngine], turns: Turns) -> None:
    """Start ``job``'s engine and add it to ``up`` (prepared to measure, joined to ``turns``); a job whose
    engine does not start, or cannot take its turns, has its cells failed and stays out."""
    runner = _Job(job, emit, placement, follow_up, kept)
    try:
        engine = runner.start()
    except EngineUnavailable as exc:
        emit(EngineState(job_id=job.job_id, state="skipped" if exc.skipped else "failed",
                         reason=exc.reason, log_tail=exc.log_tail, placement=placement))
        runner.fail_cells(job.cells, exc)
        return
    up[job.job_id] = ResidentEngine(runner, engine)
    runner.prepare_to_measure(engine)
    try:
        turns.join(job.job_id, engine)
    except CellFailed as exc:
        engine.kill()
        del up[job.job_id]
        reason = f"vLLM's sleep mode: {exc.reason}"
        emit(EngineState(job_id=job.job_id, state="failed", reason=reason, log_tail=exc.log_tail,
                         placement=placement))
        runner.fail_cells(job.cells, EngineUnavailable(reason, log_tail=exc.log_tail))


def _round_steps(up: dict[str, ResidentEngine], order: list[str], arms: dict[str, str], pairs: dict[str, str],
                 turns: Turns) -> list[list[tuple[str, int]]]:
    """A round's steps, each a list of (engine key, cell index), its engines in the round's ``order``."""
    # One step per slot (the cells of the engines that share prompts and load: what is compared with
    # each other), its engines in the round's order; in an A/B run one step per pair and cell. A step's
    # batches alternate between its engines (_step_runs): what is compared runs seconds apart at most.
    slots: dict[tuple, list[tuple[str, int]]] = {}
    for key in order:
        for i, w in enumerate(up[key].runner.job.cells):
            slots.setdefault(slot_of(w), []).append((key, i))
    steps = list(slots.values())
    if any(arms.values()):
        units = {u: [k for k in order if pairs[k] == u] for u in dict.fromkeys(pairs[k] for k in order)}
        steps = []
        for members in units.values():
            n = max(len(up[k].runner.job.cells) for k in members)
            if turns.members & set(members):  # taking turns: one arm's cells of the round, then the other's
                steps += [[(key, i)] for key in members for i in range(n)]
            else:
                steps += [[(key, i) for key in members] for i in range(n)]
    return steps


def _step_runs(up: dict[str, ResidentEngine], step: list[tuple[str, int]], r: int, rounds: int,
               finished: set[str]) -> list[tuple[str, CellWork, tuple[int, int]]]:
    """What a step runs in round ``r``, in order: (engine key, cell, prompt span), the cells with a stop
    rule, done by the hook or without a round ``r`` left out; the batches alternating between the
    engines when they run the same span in batches of one size."""
    runs: list[tuple[str, CellWork, tuple[int, int]]] = []
    for key, i in step:
        res = up[key]
        if i >= len(res.runner.job.cells):
            continue
        work = res.runner.job.cells[i]
        if work.request.cell.stop is not None or work.request.cell.cell_id in finished:
            continue
        spans = round_spans(len(work.request.prompts), rounds, work.request.cell.batch_size,
                            work.request.sampling.samples_per_prompt)
        if r < len(spans):
            runs.append((key, work, spans[r]))
    sizes = {prompts_per_batch(w.request.cell.batch_size, w.request.sampling.samples_per_prompt)
             for _, w, _ in runs}
    if len(runs) >= 2 and len({sp for _, _, sp in runs}) == 1 and len(sizes) == 1:
        # The step's batches alternate between its engines (A B | B A | … for an A/B pair), so
        # that they see the machine of the same second (its bursts last about one). A request-rate
        # cell's round is one Poisson stream: it is not cut into batches.
        unit = interleave_unit(runs[0][2], sizes.pop(), runs[0][1].request.cell.request_rate)
        runs = [(runs[o][0], runs[o][1], chunk)
                for chunk, order in batch_order(runs[0][2], unit, len(runs)) for o in order]
    return runs


def _finish_set(up: dict[str, ResidentEngine], keys: list[str], turns: Turns, follow_up: FollowUp | None) -> None:
    """After the rounds: each cell with a stop rule runs whole on its engine, every other cell that did not
    fail is done with its outcome summed over its rounds, and a job that teacher-forces the target's
    outputs after its cells scores them."""
    for key in keys:
        res = up[key]
        runner, job = res.runner, res.runner.job
        if job.teacher_forcing_after or any(w.request.cell.stop is not None for w in job.cells):
            turns.switch(key, up)  # the work after the rounds runs on this engine: awake
        for work in job.cells:
            cid = work.request.cell.cell_id
            if work.request.cell.stop is not None and res.dead is None:
                t0 = wall_now()
                runner.run_cell(res.engine, work)
                runner._phase("cells", t0)
            elif cid not in res.failed:
                outcome = res.outcomes.get(cid) or CellOutcome(counters=None, wall_time_s=0.0, num_requests=0)
                runner.cell_done(work, outcome, res.started.get(cid) or now_iso())
        if job.teacher_forcing_after and follow_up is not None and res.dead is None:
            items = follow_up(job)
            if items:
                res.engine = runner.score(res.engine, items)
