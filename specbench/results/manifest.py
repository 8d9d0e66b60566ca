"""``manifest.json``: the suite as run, the plan, the run's context and where its time went."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specbench.config.methods import VllmPassthrough
from specbench.config.plan import Plan
from specbench.config.suite import Suite
from specbench.results.migrations import MANIFEST_SCHEMA_VERSION, upgrade_manifest
from specbench.results.parts import Part

Phase = Literal["assets", "engine_start", "warmup", "cells", "teacher_forcing", "scoring", "analysis", "reports", "other"]


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


class EngineEntry(Part):
    """One engine of ``manifest.json``'s ``engines``: how its job went and what it ran."""

    key: str | None = None
    status: str | None = None
    reason: str | None = None
    describe: VllmPassthrough | None = None  # the engine's describe() once started
    # How vLLM serves a DFlash draft block vs how it was trained (part of what the engine describes).
    draft_attention: VllmPassthrough | None = None
    placement: Placement | None = None
    restarts: int | None = None


class Gpu(Part):
    """A GPU as some older manifests list it (newer ones: ``nvidia-smi``'s line, a string)."""

    name: str | None = None
    memory_gib: float | None = None


class Hardware(Part):
    """``manifest.json``'s ``hardware``: the machine a run ran on (:func:`specbench.results.rundir.hardware`)."""

    platform: str | None = None
    machine: str | None = None
    python: str | None = None
    cpu_count: int | None = None
    cpu: str | None = None
    gpus: list[str | Gpu] | None = None


class DatasetSource(Part):
    """Where one dataset came from (:func:`specbench.datasets.source_of`)."""

    source: str | None = None
    location: str | None = None
    sha256: str | None = None
    config: str | None = None
    split: str | None = None


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


class RunManifest(Part):
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


def load_manifest_dict(d: dict[str, Any]) -> RunManifest:
    return RunManifest.model_validate(upgrade_manifest(d))
