"""The schedule file: K per batch size for vLLM's dynamic speculative decoding, with its evidence (issue 37).

``specbench schedule RUN_DIR`` writes it (:mod:`specbench.analysis.k_schedule` computes it) as
JSON, ``schedule.json`` in the run directory unless told otherwise. JSON because the run
directory's other files are JSON, pydantic writes and reads it exactly, vLLM takes
``--speculative-config`` as JSON (each entry's ``speculative_config`` is ready to pass), and every
JSON file is also valid YAML, so a suite's YAML loader reads it unchanged.

Per workload (target, method, dataset, temperature) it holds:

* the τ(K) and tokens per step(K) predicted from the largest K the run measured, beside the
  measured values at the other Ks of its sweep (:class:`KPrediction`);
* the step-time model's coefficients and the predicted speedup over no speculation for each
  (K, batch size) measured (:class:`SpeedupCell`);
* the schedule (``num_speculative_tokens_per_batch_size``), each range with the speedup of its K
  and of the runner-up (:class:`ScheduleRange`), and the batch size from which speculation stops
  paying.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from specbench.config.methods import VllmPassthrough
from specbench.results import speed_estimators
from specbench.stats import Estimate

SCHEDULE_FILE = "schedule.json"
SCHEDULE_SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KPredictionPoint(_Model):
    """One K ≤ the source run's K: predicted from the source group, measured where the run ran it."""

    k: int
    tau: Estimate
    tokens_per_step: Estimate | None = None
    measured_group: str | None = None
    measured_tau: Estimate | None = None
    measured_tokens_per_step: Estimate | None = None
    tau_error: float | None = Field(None, description="predicted − measured τ")
    tolerance: float | None = Field(None, description="max(0.05, the measured τ interval's half-width)")


class KPrediction(_Model):
    """τ(K) and tokens per step(K) of one group's workload, predicted from its largest-K group."""

    target: str
    method: str
    method_kind: str
    drafter: str = Field(description="autoregressive, parallel or lookup: whether a proposal at position i "
                                     "can depend on K (parallel: the block is drafted at once)")
    dataset: str
    temperature: float
    batch_size: int
    request_rate: float | None = None
    source_group: str
    source_k: int
    points: list[KPredictionPoint]


class StepModel(_Model):
    """Time per decoding step t(K, n) = a + b·K + c·n + d·K·n (n: requests in the step), in seconds.

    Fitted by least squares on every request's decode time as the sum of its steps' times, each
    step with its own n (:mod:`specbench.analysis.step_time_model`). ``ks``: the Ks measured (with one,
    b and d are not identified and stay 0: the model holds at that K only)."""

    a: float
    b: float
    c: float
    d: float
    k_identified: bool = Field(description="b and d fitted (else 0: the model holds at the K measured)")
    n_identified: bool = Field(description="c and d fitted (else 0: the model holds at the batch size measured)")
    ks: list[int]
    n_max: int
    requests: int

    def at(self, k: int, n: float) -> float:
        return self.a + self.b * k + self.c * n + self.d * k * n


class SpeedupCell(_Model):
    """Predicted speedup over no speculation at one K and batch size (K = 0: 1 by definition)."""

    k: int
    batch_size: int
    step_time_s: Estimate | None = None
    speedup: Estimate


class ScheduleRange(_Model):
    lo: int
    hi: int
    k: int
    speedup: Estimate = Field(description="predicted speedup of K at the range's first batch size")
    runner_up_k: int | None = None
    runner_up_speedup: Estimate | None = None


class MethodSchedule(_Model):
    """One workload's schedule and its evidence."""

    target: str
    method: str
    method_kind: str
    dataset: str
    temperature: float
    num_speculative_tokens: int
    candidate_ks: list[int]
    num_speculative_tokens_per_batch_size: list[tuple[int, int, int]]
    ranges: list[ScheduleRange]
    stops_paying_at: int | None = Field(None, description="the smallest batch size where no K's predicted speedup "
                                                          "reaches 1 (None: speculation pays at every batch size "
                                                          "measured)")
    method_step_model: StepModel
    baseline_step_model: StepModel
    grid: list[SpeedupCell]
    notes: list[str] = Field(default_factory=list)
    speculative_config: VllmPassthrough = Field(description="the keys to add to the method's speculative_config")


class LoadArm(_Model):
    """One way of running the method at one load: a fixed K (0: the drafter loaded, no drafts) or the schedule."""

    label: str
    k: int | None = Field(description="the fixed K; None for the schedule")
    group_id: str
    tokens_per_step: Estimate | None = None
    tpot_s: Estimate | None = None
    speedup: Estimate | None = Field(None, description="measured over the baseline at this load (no drafter)")
    predicted_speedup: Estimate | None = Field(None, description="the step-time model's, at the load's batch size")
    predicted_tokens_per_step: Estimate | None = Field(None, description="from the largest K's acceptance per "
                                                                         "position at this load (K = 0: 1)")
    predicted_step_time_s: Estimate | None = Field(None, description="the step-time model's t(K, n)")

    @property
    def predicted_tpot_s(self) -> float | None:
        """Predicted step time over predicted tokens per step (:func:`~specbench.results.speed_estimators.tpot`
        of one step; a point value: the two intervals are apart)."""
        st, tps = self.predicted_step_time_s, self.predicted_tokens_per_step
        if st is None or tps is None or st.value is None or not tps.value:
            return None
        return float(speed_estimators.tpot(st.value, tps.value))


class ScheduleLoadCheck(_Model):
    """A scheduled method against the same drafter at each fixed K, at one load of the run (issue 37)."""

    target: str
    method: str = Field(description="the scheduled method's label")
    family: str | None = Field(None, description="the fixed-K method its schedule is judged against")
    dataset: str
    temperature: float
    batch_size: int
    request_rate: float | None = None
    schedule: list[tuple[int, int, int]]
    model_batch_size: int | None = Field(None, description="the batch size the predictions are read at (a rate "
                                                           "load: its mean requests per step)")
    arms: list[LoadArm]
    best_fixed_k: int | None = Field(None, description="the fixed K with the highest measured speedup")
    within_best: bool | None = Field(None, description="the schedule's measured speedup lies inside the best "
                                                       "fixed K's interval")
    drafted_per_step: float | None = Field(None, description="the schedule's draft tokens per decoding step, "
                                                             "from vLLM's per-request metrics")
    drafted_per_step_expected: float | None = Field(None, description="what the schedule gives each step's "
                                                                      "batch size (requests in the engine then)")
    k_share: dict[int, float] = Field(default_factory=dict, description="share of decoding steps at each K, measured")
    k_share_expected: dict[int, float] = Field(default_factory=dict)


class ScheduleFile(_Model):
    schema_version: int = SCHEDULE_SCHEMA_VERSION
    run_id: str
    suite_name: str
    predictions: list[KPrediction]
    schedules: list[MethodSchedule]
    skipped: list[str] = Field(default_factory=list, description="workloads without a schedule, and why")
    checks: list[ScheduleLoadCheck] = Field(default_factory=list, description="scheduled methods the run measured, "
                                                                             "per load, against the fixed Ks")


def schedule_path(run_dir: Path) -> Path:
    return Path(run_dir) / SCHEDULE_FILE


def write_schedule(path: Path, schedule: ScheduleFile) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(schedule.model_dump_json(indent=2) + "\n")
    tmp.replace(path)
    return path


def read_schedule(path: Path) -> ScheduleFile:
    return ScheduleFile.model_validate_json(Path(path).read_text())


def has_schedule(run_dir: Path) -> bool:
    """Whether the run directory holds its schedule file (``specbench schedule``, or a scheduled method's run)."""
    return schedule_path(run_dir).is_file()


def read_run_schedule(run_dir: Path) -> ScheduleFile:
    """The run directory's schedule file."""
    return read_schedule(schedule_path(run_dir))
