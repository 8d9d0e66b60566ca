"""Engine jobs and the events they emit (plain data, picklable and JSON-able).

An :class:`EngineJob` is the unit an executor runs: one engine configuration,
already resolved to paths, arguments and environment, and the work it serves
(the cells with their prepared prompts and resume skip-sets, or the items to
teacher-force), with the resources it needs. Running a job emits
:data:`Event` objects; only the driver writes them to the run's files.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specbench.config.methods import VllmPassthrough
from specbench.config.suite_models import HeadlineSpeedSpec
from specbench.engines.factory import ResolvedEngine
from specbench.engines.loadgen import LoadProfile
from specbench.results.manifest import Placement
from specbench.results.records import CellRecord, RequestRecord, SpecCounters
from specbench.results.requests import CellRequest, ScoreItem, ScoreRow


class CellWork(BaseModel):
    """One cell to run, with what an earlier attempt already recorded (``--resume``)."""

    model_config = ConfigDict(extra="forbid")

    request: CellRequest
    earlier_requests: int = 0
    # Counters of the earlier attempt's records (None where a record had none).
    earlier_counters: list[SpecCounters | None] = Field(default_factory=list)
    # Cells with a stop rule (request.cell.stop): the earlier attempt's records, the paired
    # baseline cell's records (speedup), the dataset's kind (accuracy) and the order's seed.
    earlier_records: list[RequestRecord] = Field(default_factory=list)
    paired: list[RequestRecord] | None = None
    dataset_kind: str | None = None
    order_seed: int = 0


class EngineJob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    kind: Literal["cells", "teacher_forcing"] = "cells"
    run_id: str
    run_dir: str  # engine logs go to run_dir/engines/ (on a cluster: the worker's file system)
    platform: str
    engine: ResolvedEngine
    load: LoadProfile | None = None  # server engines: bounds, warmup and seed every cell shares
    cells: list[CellWork] = Field(default_factory=list)
    warmup: list[CellRequest] = Field(default_factory=list)
    score_items: list[ScoreItem] = Field(default_factory=list)  # teacher forcing
    score_batch: int = 64
    gpus: int = 0  # GPUs the engine holds (TP × PP on CUDA)
    max_restarts: int = 1
    # On CPU, whether a vLLM offline engine with this one's environment follows it in the same
    # process (a zygote imports vLLM for it meanwhile, and forks it); only the local executor sets it.
    offline_engine_follows: bool = False
    # The target's baseline engine (started with full-vocabulary logprobs) teacher-forces the
    # target's sampled outputs after its own cells: one engine start fewer (local executor only).
    teacher_forcing_after: bool = False
    # Speed rounds (the plan's): > 1 runs this job interleaved with its target's other jobs
    # (specbench.execution.rounds), in the order round_order(…, round_seed) gives; local executor only.
    rounds: int = 1
    round_seed: int = 0
    instances: int = 1  # engine instances over the rounds: blocks of rounds, the engines restarted between them
    # Headline speed rounds after the single pass (the plan's; specbench.execution.headline_blocks), the label of
    # the target's reference method, and the records an earlier attempt measured in rounds (``--resume``: the
    # decisions start from them, instances and rounds are numbered on from them).
    headline: HeadlineSpeedSpec | None = None
    headline_reference: str | None = None
    round_records: list[RequestRecord] = Field(default_factory=list)

    @property
    def cell_ids(self) -> list[str]:
        return [w.request.cell.cell_id for w in self.cells]


class EngineState(BaseModel):
    kind: Literal["engine"] = "engine"
    job_id: str
    state: Literal["starting", "started", "failed", "skipped", "restarting", "closed"]
    reason: str | None = None
    log_tail: str | None = None
    describe: VllmPassthrough = Field(default_factory=dict)
    placement: Placement | None = None


class CellStarted(BaseModel):
    kind: Literal["cell_start"] = "cell_start"
    job_id: str
    cell_id: str
    prompts: int


class RequestDone(BaseModel):
    kind: Literal["request"] = "request"
    job_id: str
    record: RequestRecord


class CellDone(BaseModel):
    kind: Literal["cell"] = "cell"
    job_id: str
    record: CellRecord


class ScoresDone(BaseModel):
    """Teacher-forced scores (rows of ``equivalence.jsonl``)."""

    kind: Literal["scores"] = "scores"
    job_id: str
    rows: list[ScoreRow]
    done: int
    total: int


class PhaseTimed(BaseModel):
    """A span of a job's time: engine start, warmup, cells, teacher forcing (wall clock, epoch seconds)."""

    kind: Literal["phase"] = "phase"
    job_id: str
    phase: Literal["engine_start", "warmup", "cells", "teacher_forcing", "engine_close"]
    start: float
    end: float
    gpus: int = 0


class JobEnded(BaseModel):
    """The last event of a job; ``error`` when it ended abnormally (a worker or node died)."""

    kind: Literal["job_end"] = "job_end"
    job_id: str
    error: str | None = None


Event = Annotated[
    EngineState | CellStarted | RequestDone | CellDone | ScoresDone | PhaseTimed | JobEnded,
    Field(discriminator="kind"),
]


class EventBox(BaseModel):
    """Parses any event from its JSON form (events cross process boundaries as dicts)."""

    event: Event


def parse_event(data: dict[str, Any]) -> Event:
    return EventBox.model_validate({"event": data}).event


def wall_now() -> float:
    return time.time()
