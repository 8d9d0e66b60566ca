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
import time
from collections.abc import Callable, Sequence

from specbench.config.arms import VLLM_DEFAULT_GPU_SHARE, arm_of, base_target
from specbench.config.plan import prompts_per_batch, round_order, round_spans
from specbench.engines.kept import KeptEngines
from specbench.engines.procs import available_gib
from specbench.engines.protocol import CellFailed, Engine, EngineUnavailable, sleeper
from specbench.engines.vllm_offline import settle_zygotes
from specbench.execution.jobs import (
    CellDone,
    CellStarted,
    CellWork,
    EngineJob,
    EngineState,
    Event,
    Placement,
    RequestDone,
    wall_now,
)
from specbench.execution.worker import Emit, FollowUp, _Job, now_iso
from specbench.results.records import CellRecord, RequestRecord
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


class _Resident:
    """One job's engine kept up across rounds, with each cell's outcome summed over its rounds."""

    def __init__(self, runner: _Job, engine: Engine):
        self.runner, self.engine = runner, engine
        self.dead: str | None = None
        self.outcomes: dict[str, CellOutcome] = {}
        self.failed: set[str] = set()
        self.started: dict[str, str] = {}
        self.round_t0: dict[tuple[str, int], float] = {}  # when each cell's round sent its first batch

    def run_round(self, work: CellWork, span: tuple[int, int], r: int) -> None:
        job, req = self.runner.job, work.request
        cid = req.cell.cell_id
        if cid in self.failed:
            return
        if self.dead is not None:
            self._fail(work, self.dead, None)
            return
        if cid not in self.started:
            self.started[cid] = now_iso()
            self.runner.emit(CellStarted(job_id=job.job_id, cell_id=cid, prompts=len(req.prompts)))

        # A server's send times count from the cell's round, not from this batch of it: the batches of a
        # round are seconds apart (other engines run between them), and the step model reads who overlapped.
        shift = time.perf_counter() - self.round_t0.setdefault((cid, r), time.perf_counter())

        def on_record(rec: RequestRecord) -> None:
            update: dict = {"round": r}
            if rec.sent_offset_s is not None:
                update["sent_offset_s"] = rec.sent_offset_s + shift
            self.runner.emit(RequestDone(job_id=job.job_id, record=rec.model_copy(update=update)))

        part = req.model_copy(update={"prompts": req.prompts[span[0]:span[1]]})
        try:
            out = self.engine.run_cell(part, on_record)
        except CellFailed as exc:
            self._fail(work, f"round {r}: {exc.reason}", exc.log_tail)
            if exc.engine_dead:
                self.dead = f"the engine died in round {r} ({exc.reason}); not restarted between rounds"
            return
        prev = self.outcomes.get(cid)
        walls = list(prev.round_wall_s or []) if prev is not None else []
        walls += [0.0] * (r + 1 - len(walls))
        walls[r] += out.wall_time_s  # a round's batches of this cell, each timed by its engine
        if prev is not None:
            counters = out.counters if prev.counters is None else (
                prev.counters if out.counters is None else prev.counters + out.counters)
            out = CellOutcome(counters=counters, wall_time_s=prev.wall_time_s + out.wall_time_s,
                              num_requests=prev.num_requests + out.num_requests)
        self.outcomes[cid] = out.model_copy(update={"round_wall_s": walls})

    def _fail(self, work: CellWork, reason: str, log_tail: str | None) -> None:
        job, cid = self.runner.job, work.request.cell.cell_id
        self.failed.add(cid)
        self.runner.emit(CellDone(job_id=job.job_id, record=CellRecord(
            run_id=job.run_id, cell_id=cid, engine_key=job.engine.config.key, status="failed", reason=reason,
            engine_log_tail=log_tail, started_at=self.started.get(cid), finished_at=now_iso(),
        )))


class Turns:
    """Engines that take turns on one accelerator with vLLM's sleep mode (an A/B pair that does not fit on
    one GPU together; config.arms.with_sleep_mode): at most one of them awake. Each sleeps once started
    (the next one's start needs the memory); before an engine's cells run, the awake one sleeps and it
    wakes, and its first batch after the wake-up runs untimed (records dropped: a woken engine's first
    batch re-allocates what it dropped). An engine whose sleep or wake-up fails is ended: its later
    cells fail with the reason."""

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.awake: str | None = None

    def join(self, key: str, engine: Engine) -> None:
        """A just-started engine: put to sleep if it takes turns (raises :class:`CellFailed`)."""
        if engine.capabilities.sleeps:
            sleeper(engine).sleep()
            self.members.add(key)

    def switch(self, key: str, up: dict[str, _Resident], warm: tuple[CellWork, tuple[int, int], int] | None = None,
               ) -> bool:
        """Make ``key``'s engine the awake one (and run ``warm``'s first batch untimed: the cell, its round
        span and the round). False when nothing had to change."""
        res = up[key]
        if key not in self.members or self.awake == key or res.dead is not None:
            return False
        if self.awake is not None:
            self._toggle(up[self.awake], wake=False)
            self.awake = None
        if not self._toggle(res, wake=True):
            return True
        self.awake = key
        if warm is not None:
            work, span, r = warm
            unit = prompts_per_batch(work.request.cell.batch_size, work.request.sampling.samples_per_prompt)
            first = work.request.model_copy(update={"prompts": work.request.prompts[span[0]:min(span[1], span[0] + unit)]})
            try:
                res.engine.run_cell(first, lambda rec: None)
            except CellFailed as exc:
                res._fail(work, f"round {r}: the untimed batch after a wake-up: {exc.reason}", exc.log_tail)
                if exc.engine_dead:
                    res.dead = f"the engine died in round {r} ({exc.reason})"
        return True

    @staticmethod
    def _toggle(res: _Resident, *, wake: bool) -> bool:
        try:
            engine = sleeper(res.engine)
            engine.wake_up() if wake else engine.sleep()
            return True
        except CellFailed as exc:
            res.dead = f"vLLM's sleep mode: {exc.reason}; the engine was ended"
            res.engine.kill()
            return False


#: Called after each round with the round's index and its request records; returns the cells that
#: need no more rounds (an A/B run's decided groups: specbench.execution.ab_round_decisions).
RoundHook = Callable[[int, list[RequestRecord]], set[str]]


def ab_round_order(keys: list[str], pairs: dict[str, str], arms: dict[str, str], round_index: int,
                   seed: int) -> list[str]:
    """An A/B run's order in one round: the engine pairs in a seeded order, and within each pair the arms
    alternating round by round (A B | B A | A B | …: ABBA over two rounds), from a seeded phase per pair."""
    import random

    units = sorted(set(pairs.values()))
    order = round_order(units, round_index, seed)
    out: list[str] = []
    for u in order:
        members = sorted((k for k in keys if pairs[k] == u), key=lambda k: arms[k])
        phase = random.Random(f"{seed}:{u}").randrange(2)
        out += members if (round_index + phase) % 2 == 0 else members[::-1]
    return out


def batch_order(span: tuple[int, int], unit: int, members: int = 2) -> list[tuple[tuple[int, int], tuple[int, ...]]]:
    """A round ``span`` of cells that ``members`` engines run on the same prompts, in batches of ``unit``
    prompts (:func:`~specbench.config.plan.prompts_per_batch`), each with the order the engines run it in:
    forwards, backwards, forwards, … (ABBA by batch: over two batches every engine has the same mean place,
    and every two engines have each gone first once; the round's order already alternates round by round).
    An A/B pair is two members: (0, 1), (1, 0), (0, 1), …"""
    a, b = span
    unit = max(1, unit)
    chunks = [(s, min(b, s + unit)) for s in range(a, b, unit)]
    fwd = tuple(range(members))
    return [(c, fwd if j % 2 == 0 else fwd[::-1]) for j, c in enumerate(chunks)]


def interleave_unit(span: tuple[int, int], batch_unit: int, request_rate: float | None) -> int:
    """Prompts an engine runs before the next engine of a round's step takes its turn: one batch of a
    closed-loop cell, or the whole round of a request-rate cell (one Poisson stream, not cut)."""
    return span[1] - span[0] if request_rate is not None else batch_unit


def slot_of(work: CellWork) -> tuple:
    """Cells of one round that a normal run interleaves by batch: the same prompts at the same load (a
    method, its reference and the baseline on one dataset, temperature, load and repeat: what the headline
    and the speedups pair)."""
    c = work.request.cell
    return (*c.baseline_group_key, c.repeat)


def run_interleaved(jobs: Sequence[EngineJob], emit: Emit, placement: Placement,
                    follow_up: FollowUp | None = None, free_gib: float | None = None,
                    kept: KeptEngines | None = None, round_hook: RoundHook | None = None) -> None:
    """Run one target's cell jobs (their ``rounds`` and ``round_seed``) in interleaved rounds (an A/B
    run: both arms' jobs of one target, pairs resident together)."""
    cap = resident_cap(jobs, available_gib() if free_gib is None else free_gib)
    for group in resident_sets(jobs, cap):
        _run_set(group, group[0].rounds, group[0].round_seed, emit, placement, follow_up, kept, round_hook)


def _run_set(group: list[EngineJob], rounds: int, seed: int, emit: Emit, placement: Placement,
             follow_up: FollowUp | None, kept: KeptEngines | None, round_hook: RoundHook | None = None) -> None:
    up: dict[str, _Resident] = {}
    turns = Turns()
    finished: set[str] = set()  # cells the hook needs no more rounds of
    this_round: list[RequestRecord] = []
    if round_hook is not None:
        inner_emit = emit

        def emit(ev: Event) -> None:  # noqa: F811 - the round's records, kept for the hook
            if isinstance(ev, RequestDone):
                this_round.append(ev.record)
            inner_emit(ev)
    try:
        for job in group:
            _start_resident(job, emit, placement, follow_up, kept, up, turns)
        keys = list(up)
        # A later start may have left a zygote importing vLLM (one that failed to start has no
        # warmup that waits for it): it is done before the first measured round.
        t0 = wall_now()
        if settle_zygotes() > 0.05 and keys:
            up[keys[-1]].runner._phase("warmup", t0)
        arms = {k: arm_of(up[k].runner.job.engine.config.target.name) or "" for k in keys}
        pairs = {k: pair_key(up[k].runner.job) for k in keys}
        measured = {w.request.cell.cell_id for k in keys for w in up[k].runner.job.cells if w.request.cell.stop is None}
        for r in range(rounds):
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
        _finish_set(up, keys, turns, follow_up)
    except BaseException:
        for res in up.values():
            res.engine.kill()
        raise
    finally:
        for res in up.values():
            res.runner.close(res.engine)


def _start_resident(job: EngineJob, emit: Emit, placement: Placement, follow_up: FollowUp | None,
                    kept: KeptEngines | None, up: dict[str, _Resident], turns: Turns) -> None:
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
    up[job.job_id] = _Resident(runner, engine)
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


def _round_steps(up: dict[str, _Resident], order: list[str], arms: dict[str, str], pairs: dict[str, str],
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


def _step_runs(up: dict[str, _Resident], step: list[tuple[str, int]], r: int, rounds: int,
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


def _finish_set(up: dict[str, _Resident], keys: list[str], turns: Turns, follow_up: FollowUp | None) -> None:
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
