"""``manifest.json``: the suite as run, the plan, the run's context and where its time went.

:func:`build_manifest` makes a new run's manifest; :func:`specbench.results.rundir.read_manifest`
and :func:`~specbench.results.rundir.write_manifest` read (migrating any older schema) and write it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from specbench.config.methods import VllmPassthrough
from specbench.config.plan import Plan
from specbench.config.suite import Suite
from specbench.results import environment
from specbench.results.migrations import MANIFEST_SCHEMA_VERSION, hardware_class, upgrade_manifest
from specbench.results.parts import Part
from specbench.results.records import now_iso

Phase = Literal["assets", "engine_start", "warmup", "cells", "teacher_forcing", "scoring", "analysis", "reports", "other"]


class InOrder(Part):
    """A part written back with its keys in the order it was read (a stored manifest saved again is the
    file it was, and the report lists its hardware and engine arguments in the order they were stored)."""

    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        model = handler(data)
        if isinstance(data, dict) and isinstance(model, InOrder):
            model._order = list(data)
        return model

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        first = {k: data[k] for k in self._order if k in data}
        return {**first, **{k: v for k, v in data.items() if k not in first}}


class Span(BaseModel):
    """One stretch of work: ``start``/``end`` in wall-clock seconds (``time.time()``)."""

    phase: Phase
    start: float
    end: float
    engine: str | None = None
    groups: list[str] | None = None
    gpus: int | None = None

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


class Placement(BaseModel):
    """Where a job ran."""

    model_config = ConfigDict(extra="forbid")

    executor: str
    hostname: str
    node_id: str | None = None
    node_ip: str | None = None
    node_name: str | None = None  # how messages name the Ray node: host ip:port (node id)
    pid: int
    gpu_ids: list[str] = Field(default_factory=list)
    cpu_ids: list[int] = Field(default_factory=list)  # the cores the engine was bound to (Ray, CPU nodes)


class EngineDescription(InOrder):
    """What an engine said about itself once started (its ``describe()``): the arguments vLLM got."""

    engine: str | None = None  # vllm-offline | vllm-server | reference
    dtype: str | None = None  # the dtype vLLM resolved ("auto" made concrete)
    vllm_version: str | None = None  # the vLLM release the engine's process imported (an A/B arm's may differ)
    llm_kwargs: VllmPassthrough | None = None  # vLLM's own arguments, as handed to it
    kept_from: str | None = None  # a kept engine (api.run(keep=...)): the log of the run that started it
    kv_cache_tokens: int | None = None  # the tokens its KV cache holds (blocks × block size), as vLLM allocated it
    draft_weights_mib: float | None = None  # the drafter checkpoint's weight files (a local checkpoint), MiB


class DraftAttention(Part):
    """How vLLM serves a DFlash draft block vs how it was trained (:func:`specbench.zoo.draft_attention.block_attention`)."""

    served: str | None = None  # causal | non-causal
    trained: str | None = None  # causal | non-causal | mixed
    mismatch: bool = False
    why: str = ""


class EngineEntry(InOrder):
    """One engine of ``manifest.json``'s ``engines``: how its job went and what it ran."""

    key: str | None = None
    status: str | None = None
    reason: str | None = None
    describe: EngineDescription | None = None  # the engine's describe() once started
    # How vLLM serves a DFlash draft block vs how it was trained (part of what the engine describes).
    draft_attention: DraftAttention | None = None
    placement: Placement | None = None
    restarts: int | None = None


class Gpu(Part):
    """A GPU as some older manifests list it (newer ones: ``nvidia-smi``'s line, a string)."""

    name: str | None = None
    memory_gib: int | float | None = None  # as stored (an int stays an int)


class Hardware(InOrder):
    """``manifest.json``'s ``hardware``: the machine a run ran on (:func:`specbench.results.rundir.hardware`)."""

    platform: str | None = None
    machine: str | None = None
    python: str | None = None
    cpu_count: int | None = None
    cpu: str | None = None
    gpus: list[str | Gpu] | None = None


class DatasetLengths(Part):
    """How a dataset's prompts of given input lengths were built."""

    input_tokens: list[int] = Field(default_factory=list)
    construction: str | None = None
    prefix_caching: str | None = None


class DatasetSource(InOrder):
    """Where one dataset came from (:func:`specbench.datasets.source_of`)."""

    source: str | None = None
    location: str | None = None
    sha256: str | None = None
    config: str | None = None
    split: str | None = None
    lengths: DatasetLengths | None = None


class EnginePatchNote(Part):
    name: str
    summary: str | None = None


class PhaseTime(Part):
    """One phase of a run's wall (see :mod:`specbench.analysis.timing` for the definitions)."""

    phase: str
    wall_s: float  # attributed wall (overlaps go to the phase of higher precedence)
    share: float  # wall_s / the run's wall
    busy_s: float = 0.0  # the union of the phase's own spans
    engine_s: float = 0.0  # the sum of its engine spans' durations
    gpu_s: float | None = None
    spans: int = 0  # how many spans (with an engine or not)


class EngineTime(Part):
    engine: str
    engine_s: float
    gpu_s: float | None = None
    by_phase: dict[str, float] = Field(default_factory=dict)  # phase → engine-seconds


class GroupTime(Part):
    group_id: str
    engines: list[str] = Field(default_factory=list)
    cells_s: float = 0.0  # its cells' engine-seconds
    overhead_s: float = 0.0  # its share of its engines' other spans (start, warmup, ...)
    engine_s: float = 0.0  # cells_s + overhead_s
    gpu_s: float | None = None


class TimeBreakdown(Part):
    """``manifest.json``'s ``time_breakdown``: the run's wall, by phase, engine and group."""

    wall_s: float
    phases: list[PhaseTime] = Field(default_factory=list)  # timing.PHASES order, then "unaccounted"
    unaccounted_s: float = 0.0
    harness_s: float = 0.0
    harness_share: float = 0.0
    overlap_s: float = 0.0  # wall where two engines or more were busy at once (parallel executors)
    engines: list[EngineTime] = Field(default_factory=list)
    groups: list[GroupTime] = Field(default_factory=list)
    source: str = "recorded"  # "recorded" (a Timeline) or "estimated" (from a run's files)
    notes: list[str] = Field(default_factory=list)

    def phase(self, name: str) -> PhaseTime | None:
        return next((p for p in self.phases if p.phase == name), None)

    def wall_of(self, name: str) -> float:
        p = self.phase(name)
        return p.wall_s if p is not None else 0.0


class RunManifest(InOrder):
    """``manifest.json``: the suite as run, the plan and the run's context."""

    schema_version: int = MANIFEST_SCHEMA_VERSION
    run_id: str
    suite_name: str
    suite_path: str | None = None
    suite: Suite | None = None  # the suite as run (None in the oldest manifests)
    plan: Plan | None = None  # its cells and engines (None before plans were stored)
    limit: int | None = None
    seed: int | None = None
    platform: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    resumed_at: list[str] = Field(default_factory=list)
    executors: list[str] = Field(default_factory=list)  # the executor of each session (local | ray)
    # "running", "complete", or "interrupted" (by the signal in interrupted_by: resume it); None before this field
    status: str | None = None
    interrupted_by: str | None = None
    git_commit: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    specbench_version: str | None = None
    hardware: Hardware = Field(default_factory=Hardware)
    hardware_class: str = "unknown"
    command: str | None = None
    datasets: dict[str, DatasetSource] = Field(default_factory=dict)  # where each dataset came from (source, sha256)
    engine_patches: dict[str, list[EnginePatchNote]] = Field(default_factory=dict)  # by target
    engines: list[EngineEntry] = Field(default_factory=list)
    time_breakdown: TimeBreakdown | None = None  # where the wall went (specbench.analysis.timing); absent before issue 16
    timeline: list[Span] = Field(default_factory=list)  # its spans (specbench.analysis.timing)

    @classmethod
    def load(cls, data: dict[str, Any]) -> RunManifest:
        """A stored manifest of any schema version."""
        return cls.model_validate(upgrade_manifest(data))

    def stored(self) -> dict[str, Any]:
        """The manifest as written: every key it was read or built with (an older file keeps its shape,
        nothing it held is lost) and every field changed since."""
        for name, field in type(self).model_fields.items():
            if name not in self.model_fields_set and getattr(self, name) != field.get_default(call_default_factory=True):
                self.__pydantic_fields_set__.add(name)  # a list changed in place (resumed_at, executors)
        return self.model_dump(mode="json", exclude_unset=True)

    def set_time(self, spans: list[Span], breakdown: TimeBreakdown) -> None:
        """The run's time line and where its wall went (stored whole, as they were built)."""
        self.timeline = [Span.model_validate(s.model_dump(mode="json", exclude_none=True)) for s in spans]
        self.time_breakdown = TimeBreakdown.model_validate(breakdown.model_dump(mode="json"))

    def engine_dtypes(self) -> dict[str, str | None]:
        """Engine key → the dtype its logits were computed in: as the engine reported it
        once started (vLLM's resolution of "auto"), else the target's ``dtype``."""
        out: dict[str, str | None] = {e.key: e.target.dtype for e in self.plan.engines} if self.plan else {}
        for e in self.engines:
            if e.describe is not None and e.describe.dtype and e.key:
                out[e.key] = e.describe.dtype
        return out


def build_manifest(suite: Suite, plan: Plan, *, run_id: str, platform: str, limit: int | None, command: str,
                   datasets: dict[str, Any], engine_patches: dict[str, list[dict[str, Any]]]) -> RunManifest:
    """A new run's manifest: the suite and plan as run, and where it runs (git commit, package versions,
    hardware). ``datasets``: where each dataset comes from (:func:`specbench.datasets.source_of`);
    ``engine_patches``: per target, the engine patches it runs with (name and summary)."""
    src = Path(suite.source_path) if suite.source_path else None
    hw, versions = environment.hardware(), environment.package_versions()
    # validated from plain data, so every key is one the model was given (and is written)
    return RunManifest.model_validate({
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "run_id": run_id,
        "suite_name": suite.name,
        "suite_path": str(src) if src else None,
        "suite": suite.model_dump(mode="json"),
        "plan": plan.model_dump(mode="json"),
        "limit": limit,
        "seed": suite.sampling.seed,
        "platform": platform,
        "created_at": now_iso(),
        "git_commit": environment.git_commit(src.parent if src else None),
        "versions": versions,
        "hardware": hw,
        "hardware_class": hardware_class(hw),
        "specbench_version": versions.get("specbench"),
        "command": command,
        "datasets": datasets,
        "engine_patches": engine_patches,
    })
