"""Typed, versioned parts of a run's stored JSON (``summary.json``, ``manifest.json``).

Each file carries ``schema_version``. The current writers produce
:data:`SUMMARY_SCHEMA_VERSION` / :data:`MANIFEST_SCHEMA_VERSION`; every older
version keeps one loader (:data:`SUMMARY_MIGRATIONS`, :data:`MANIFEST_MIGRATIONS`)
that brings it one step up, so a history can read every run it ever stored.
Fixtures of each older version live in ``tests/fixtures/schema/``.

Versions
--------
summary 1: ``checks`` and ``extra`` untyped. Some early writers nested the
serving rows or cross-check rows under ``{"rows": [...]}``.
summary 2: ``checks`` are :class:`CounterCheck`; ``extra`` is
:class:`SummaryExtra` (``serving``, ``cross_check``, ``scoring_notes`` typed,
other keys kept as they are).

manifest 1 (or no version): a dict of run facts.
manifest 2: :class:`RunManifest`, adds ``hardware_class`` (what a history
compares runs within) and ``specbench_version``; later, optional (no new
version): ``time_breakdown`` (:class:`TimeBreakdown`) and ``timeline`` (its spans).

The typed parts read like the dicts they were (``part["key"]``,
``part.get("key")``, ``"key" in part``) so code written against the dicts
keeps working; new code should use attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from specbench.serving_metrics import ServingSummary, Speedup
from specbench.stats import Estimate

SUMMARY_SCHEMA_VERSION = 2
MANIFEST_SCHEMA_VERSION = 2


class SchemaError(ValueError):
    pass


class Part(BaseModel):
    """A typed part that also reads like the dict it replaces."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    def __getitem__(self, key: str) -> Any:
        if key in type(self).model_fields or key in (self.model_extra or {}):
            return getattr(self, key)
        raise KeyError(key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) not in (None, [], {})

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self) -> list[str]:
        return [k for k, v in self.model_dump(exclude_none=True).items() if v not in ([], {})]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, self[k]) for k in self.keys()]


class CounterCheck(Part):
    """One internal-consistency check of a group's counters."""

    group_id: str
    check: str
    ok: bool


class CrossCheckRow(Part):
    """Reference-simulator τ next to vLLM τ for one (method, K, dataset)."""

    method: str
    method_kind: str | None = None
    k: int | None = None
    dataset: str
    vllm_group: str | None = None
    reference_group: str | None = None
    vllm_tau: Estimate
    reference_tau: Estimate
    target: str
    flag: bool
    config_mismatch: str | None = None
    note: str = ""


class _Reads:
    """Dict-style reads of a strict row (``row["method"]``, ``row.get("method")``)."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


class ServingSpeedupRow(_Reads, Speedup):
    """A method's speedup over the baseline at one load on a server target."""

    target: str
    dataset: str
    temperature: float | None = None


class ServingCellRow(_Reads, ServingSummary):
    """One server cell's latency percentiles and throughput."""

    kind: Literal["cell"] = "cell"
    target: str
    dataset: str
    temperature: float | None = None


ServingRow = ServingCellRow | ServingSpeedupRow


class SummaryExtra(Part):
    serving: list[ServingCellRow | ServingSpeedupRow] = Field(default_factory=list)
    cross_check: list[CrossCheckRow] = Field(default_factory=list)
    scoring_notes: list[str] = Field(default_factory=list)
    torn_lines: list[str] = Field(default_factory=list)  # "file:line" of torn last lines analyze dropped


class EngineEntry(Part):
    key: str | None = None
    status: str | None = None


class PhaseTime(Part):
    """One phase of a run's wall (see :mod:`specbench.timing` for the definitions)."""

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
    suite: dict[str, Any] = Field(default_factory=dict)
    plan: dict[str, Any] = Field(default_factory=dict)
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
    hardware: dict[str, Any] = Field(default_factory=dict)
    hardware_class: str = "unknown"
    command: str | None = None
    datasets: dict[str, Any] = Field(default_factory=dict)  # where each dataset came from (source, sha256)
    engine_patches: dict[str, Any] = Field(default_factory=dict)
    engines: list[EngineEntry] = Field(default_factory=list)
    time_breakdown: TimeBreakdown | None = None  # where the wall went (specbench.timing); absent before issue 16
    timeline: list[dict[str, Any]] = Field(default_factory=list)  # its spans (specbench.timing.Span)


def hardware_class(hw: dict[str, Any]) -> str:
    """What a history compares runs within: the GPU models (or the CPU model) and their count."""
    gpus = [str(g.get("name") if isinstance(g, dict) else g).split(",")[0].strip() for g in hw.get("gpus") or []]
    gpus = [g for g in gpus if g and g != "None"]
    if gpus:
        names = sorted(set(gpus))
        return "gpu:" + "+".join(f"{len([g for g in gpus if g == n])}x{n}" for n in names)
    cpu = str(hw.get("cpu") or hw.get("machine") or "unknown")
    return f"cpu:{cpu}" + (f" x{hw['cpu_count']}" if hw.get("cpu_count") else "")


# --------------------------------------------------------------------------
# loaders of older versions: each takes version v and returns version v + 1


def _rows(x: Any) -> Any:
    """v1 writers sometimes nested a list under "rows" or "speedups"."""
    if isinstance(x, dict):
        for key in ("rows", "speedups"):
            if isinstance(x.get(key), list):
                return x[key]
    return x


def _serving_v1(r: dict[str, Any]) -> dict[str, Any] | None:
    """A v1 serving row: a cell row, a Speedup row, or a hand-made row with its speedup under "speedup"."""
    if r.get("kind") == "cell" or "estimate" in r:
        return r
    if not isinstance(r.get("speedup"), dict):
        return None  # a shape nothing produces: nothing to keep
    keep: dict[str, Any] = {k: r[k] for k in ("target", "dataset", "temperature", "method", "concurrency", "request_rate") if k in r}
    n = int(r["speedup"].get("n") or 0)
    return {**keep, "metric": "throughput", "estimate": r["speedup"], "n_method": n, "n_baseline": n}


def _cross_check_v1(r: dict[str, Any]) -> dict[str, Any]:
    """v1 cross-check rows may say "agree"/"ok" (the reverse of "flag") and "vllm"/"reference"."""
    out = dict(r)
    for old, new in (("vllm", "vllm_tau"), ("reference", "reference_tau")):
        if old in out and new not in out:
            out[new] = out.pop(old)
    for key in ("agree", "ok"):
        if key in out:
            agree = out.pop(key)
            out.setdefault("flag", not agree)
    out.setdefault("note", "")
    return out


def _summary_v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    extra = dict(d.get("extra") or {})
    if "serving" in extra:
        extra["serving"] = [x for x in (_serving_v1(r) for r in _rows(extra["serving"]) or [] if isinstance(r, dict))
                            if x is not None]
    if "cross_check" in extra:
        extra["cross_check"] = [_cross_check_v1(r) for r in _rows(extra["cross_check"]) or [] if isinstance(r, dict)]
    if "scoring_notes" in extra and isinstance(extra["scoring_notes"], str):
        extra["scoring_notes"] = [extra["scoring_notes"]]
    checks = [{**c, "ok": bool(c.get("ok"))} for c in d.get("checks") or [] if isinstance(c, dict)]
    return {**d, "schema_version": 2, "checks": checks, "extra": extra}


def _manifest_v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    out = {**d, "schema_version": 2}
    out.setdefault("hardware_class", hardware_class(d.get("hardware") or {}))
    out.setdefault("specbench_version", (d.get("versions") or {}).get("specbench"))
    if isinstance(out.get("resumed_at"), str):
        out["resumed_at"] = [out["resumed_at"]]
    return out


SUMMARY_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _summary_v1_to_v2}
MANIFEST_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _manifest_v1_to_v2}


def _upgrade(d: dict[str, Any], current: int, steps: dict[int, Callable], what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise SchemaError(f"{what}: expected a JSON object")
    v = d.get("schema_version", 1)
    if not isinstance(v, int) or v < 1:
        raise SchemaError(f"{what}: bad schema_version {v!r}")
    if v > current:
        raise SchemaError(f"{what} schema {v} is newer than this specbench ({current}); upgrade specbench")
    while v < current:
        d = steps[v](d)
        v = d["schema_version"]
    return d


def upgrade_summary(d: dict[str, Any]) -> dict[str, Any]:
    """A stored summary dict of any version, as the current version's dict."""
    return _upgrade(d, SUMMARY_SCHEMA_VERSION, SUMMARY_MIGRATIONS, "summary")


def upgrade_manifest(d: dict[str, Any]) -> dict[str, Any]:
    """A stored manifest dict of any version, as the current version's dict."""
    return _upgrade(d, MANIFEST_SCHEMA_VERSION, MANIFEST_MIGRATIONS, "manifest")


def load_manifest_dict(d: dict[str, Any]) -> RunManifest:
    return RunManifest.model_validate(upgrade_manifest(d))
