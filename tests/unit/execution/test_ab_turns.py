"""An A/B pair that does not fit on one GPU together takes turns with vLLM's sleep mode (issue 36):
the schedule `execution.rounds` runs, on stand-in engines that log what they are asked (vLLM's sleep
mode needs CUDA; what it is asked is checked here, the plan's arguments in tests/unit/config/test_arms.py)."""

from __future__ import annotations

from typing import Any

import pytest
from support.factories import cell, cell_record, request

from specbench.config.plan import EngineConfig
from specbench.config.suite import MethodSpec, TargetSpec
from specbench.engines.factory import ResolvedEngine
from specbench.engines.protocol import CellFailed, EngineCapabilities
from specbench.execution import rounds
from specbench.execution.jobs import CellDone, CellWork, EngineJob, RequestDone
from specbench.results.requests import CellOutcome, CellRequest, PreparedPrompt, SamplingRequest

PROMPTS = 8


class StandIn:
    """An engine that logs its calls; ``awake`` must hold while it runs a cell."""

    def __init__(self, key: str, log: list[tuple], sleeps: bool, fail_wake: bool = False):
        self.key, self.log, self.fail_wake = key, log, fail_wake
        self.capabilities = EngineCapabilities(kind="vllm-offline", sleeps=sleeps)
        self.awake = True

    def sleep(self) -> None:
        self.log.append(("sleep", self.key))
        self.awake = False

    def wake_up(self) -> None:
        self.log.append(("wake", self.key))
        if self.fail_wake:
            raise CellFailed("RuntimeError: CUDA out of memory")
        self.awake = True

    def run_cell(self, req: CellRequest, emit: Any) -> CellOutcome:
        assert self.awake, f"{self.key} ran a cell asleep"
        self.log.append(("cell", self.key, req.cell.cell_id, tuple(p.prompt_id for p in req.prompts)))
        for p in req.prompts:
            emit(request(req.cell, p.prompt_id))
        return CellOutcome(counters=None, wall_time_s=0.1, num_requests=len(req.prompts))

    def kill(self) -> None:
        self.log.append(("kill", self.key))


class Runner:
    """Stands in for execution.worker._Job: starts a StandIn and passes on what the rounds emit."""

    engines: dict[str, StandIn] = {}

    def __init__(self, job: EngineJob, emit: Any, placement: Any, follow_up: Any, kept: Any):
        self.job, self.emit = job, emit

    def start(self) -> StandIn:
        eng = self.engines[self.job.job_id]
        eng.log.append(("start", eng.key))
        if eng.capabilities.sleeps:  # the GPU is free for it: every engine started before sleeps
            assert not any(e.awake for k, e in self.engines.items() if k != eng.key and ("start", k) in eng.log), \
                "an engine started while another was awake"
        return eng

    def prepare_to_measure(self, engine: StandIn) -> None:
        pass

    def _phase(self, phase: str, t0: float) -> None:
        pass

    def cell_done(self, work: CellWork, outcome: CellOutcome, started: str) -> None:
        self.emit(CellDone(job_id=self.job.job_id, record=cell_record(work.request.cell)))

    def close(self, engine: StandIn) -> None:
        pass


def _job(arm: str, sleeps: bool = True) -> EngineJob:
    target = f"tiny@{arm}"
    m = MethodSpec(method="eagle3")
    cfg = EngineConfig(key=f"{target}--eagle3", target=TargetSpec(name=target, model="m", methods=[m]), method=m,
                       vllm_method=None, speculative_config=None)
    eng = ResolvedEngine(config=cfg, model_path="m", speculator_path=None,
                         engine_kwargs={"enable_sleep_mode": True} if sleeps else {}, env={})
    cells = [CellWork(request=CellRequest(
        run_id="r", cell=cell("eagle3", target=target, batch_size=bs),
        prompts=[PreparedPrompt(prompt_id=f"p{i}", text="x") for i in range(PROMPTS)],
        sampling=SamplingRequest(temperature=0.0, max_tokens=8))) for bs in (1, 4)]
    return EngineJob(job_id=cfg.key, run_id="r", run_dir="/tmp", platform="cuda", engine=eng, cells=cells,
                     rounds=2, round_seed=1)


def _run(monkeypatch: pytest.MonkeyPatch, jobs: list[EngineJob], engines: dict[str, StandIn]) -> list:
    monkeypatch.setattr(rounds, "_Job", Runner)
    monkeypatch.setattr(rounds, "settle_zygotes", lambda: 0.0)
    monkeypatch.setattr(Runner, "engines", engines)
    events: list = []
    rounds._run_set(jobs, 2, 1, events.append, None, None, None)  # type: ignore[arg-type]
    return events


def test_a_pair_takes_turns_one_arm_awake_its_first_batch_after_a_wake_up_untimed(monkeypatch) -> None:
    log: list[tuple] = []
    jobs = [_job("a"), _job("b")]
    engines = {j.job_id: StandIn(j.job_id, log, sleeps=True) for j in jobs}
    events = _run(monkeypatch, jobs, engines)
    a, b = (j.job_id for j in jobs)
    # Each engine sleeps once started, so the next one's start has the GPU.
    assert log[:4] == [("start", a), ("sleep", a), ("start", b), ("sleep", b)]
    # Per round, one arm's cells then the other's; the arm going first alternates (ABBA), so the arm that
    # ended round 0 begins round 1 awake: three wake-ups in two rounds, each followed by an untimed batch.
    turns = [e for e in log[4:] if e[0] == "wake"]
    assert len(turns) == 3 and turns[0][1] != turns[1][1] and turns[2][1] == turns[0][1]
    timed = [(e[1], e[2], e[3]) for e in log if e[0] == "cell"]
    recorded = [ev.record for ev in events if isinstance(ev, RequestDone)]
    # Every prompt of every cell recorded once, in the round its span belongs to; none from an untimed batch.
    assert len(recorded) == 2 * 2 * PROMPTS
    assert len({(r.cell_id, r.prompt_id) for r in recorded}) == len(recorded)
    assert {r.round for r in recorded} == {0, 1}
    # After each wake-up, the first batch of the turn's first cell runs untimed (its records dropped), then
    # the cell's whole round runs timed from that same prompt.
    for i in (i for i, e in enumerate(log) if e[0] == "wake"):
        untimed, first = log[i + 1], log[i + 2]
        assert untimed[0] == first[0] == "cell" and untimed[1:3] == first[1:3]
        assert len(untimed[3]) == (1 if untimed[2].endswith("b1/r0") else 4) and first[3][:len(untimed[3])] == untimed[3]
    assert len(timed) == 3 + 2 * 2 * 2  # three untimed batches, then each engine's two cells in two rounds
    # Between two wake-ups the cells are one engine's: both its cells of the round, then the other's.
    keys_between = []
    for e in log[4:]:
        if e[0] == "wake":
            keys_between.append(set())
        elif e[0] == "cell" and keys_between:
            keys_between[-1].add(e[1])
    assert all(len(k) == 1 for k in keys_between)


def test_a_failed_wake_up_ends_that_engine_and_fails_its_cells_the_other_arm_goes_on(monkeypatch) -> None:
    log: list[tuple] = []
    jobs = [_job("a"), _job("b")]
    engines = {jobs[0].job_id: StandIn(jobs[0].job_id, log, sleeps=True, fail_wake=True),
               jobs[1].job_id: StandIn(jobs[1].job_id, log, sleeps=True)}
    events = _run(monkeypatch, jobs, engines)
    assert ("kill", jobs[0].job_id) in log
    failed = [ev.record for ev in events if isinstance(ev, CellDone) and getattr(ev.record, "status", None) == "failed"]
    assert {c.cell_id.split("/")[0] for c in failed} == {"tiny@a"} and len(failed) == 2
    assert all("sleep mode" in c.reason and "CUDA out of memory" in c.reason for c in failed)
    recorded = [ev.record for ev in events if isinstance(ev, RequestDone)]
    assert {r.cell_id.split("/")[0] for r in recorded} == {"tiny@b"} and len(recorded) == 2 * PROMPTS


def test_engines_without_sleep_mode_alternate_by_batch_and_never_sleep(monkeypatch) -> None:
    log: list[tuple] = []
    jobs = [_job("a", sleeps=False), _job("b", sleeps=False)]
    engines = {j.job_id: StandIn(j.job_id, log, sleeps=False) for j in jobs}
    _run(monkeypatch, jobs, engines)
    assert not any(e[0] in ("sleep", "wake") for e in log)
    b1 = [e[1] for e in log if e[0] == "cell" and e[2].endswith("b1/r0")]
    assert len(b1) == 2 * PROMPTS and all(b1[i] != b1[i + 1] for i in range(0, len(b1), 2))  # A B | B A by batch
