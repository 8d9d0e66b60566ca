"""A run session's ``manifest.json``: the one a new run starts with (:func:`new_run_manifest`) or a resumed run's
stored one brought up to this session (:func:`resume_manifest`); what the session adds at its end
(:func:`finish_manifest`) and where its time went (:func:`record_time_breakdown`). The model, and reading and
writing it: :mod:`specbench.results.manifest`, :mod:`specbench.results.rundir`."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from specbench import datasets
from specbench.analysis.timing_estimate import engine_spans
from specbench.config.plan import Plan
from specbench.config.suite import Suite
from specbench.engines.vllm_patches import PATCHES as ENGINE_PATCHES
from specbench.execution.timeline import Timeline
from specbench.results import rundir
from specbench.results.manifest import DatasetSource, EngineEntry, RunManifest, build_manifest
from specbench.results.records import now_iso
from specbench.settings import settings


def new_run_manifest(suite: Suite, plan: Plan, run_id: str, platform: str, limit: int | None) -> RunManifest:
    """A new run's manifest: :func:`~specbench.results.manifest.build_manifest` with the command that started
    it, where each dataset comes from and the engine patches each target runs with."""
    base = Path(suite.source_path).parent if suite.source_path else Path.cwd()
    return build_manifest(
        suite, plan, run_id=run_id, platform=platform, limit=limit, command=settings().command or shlex.join(sys.argv),
        datasets={d.name: datasets.source_of(d, base) for d in suite.datasets},
        engine_patches=_engine_patches(suite),
    )


def _engine_patches(suite: Suite) -> dict[str, list[dict[str, str]]]:
    """The engine patches each target runs with (under its name) and each method's own (``target/method``)."""
    def described(names: list[str]) -> list[dict[str, str]]:
        return [{"name": n, "summary": ENGINE_PATCHES[n].summary} for n in names]

    out = {t.name: described(t.engine_patches) for t in suite.targets if t.engine_patches and t.engine != "reference"}
    out.update({f"{t.name}/{m.label}": described(m.engine_patches) for t in suite.targets if t.engine != "reference"
                for m in t.methods if m.engine_patches})
    return out


def resume_manifest(manifest: RunManifest, suite: Suite, sources: dict[str, dict[str, Any]]) -> RunManifest:
    """A resumed run's stored manifest, updated in place for this session and returned: the suite it runs (a
    manifest from before it stored its suite gets it), where each dataset comes from (``sources``, as
    :func:`specbench.execution.run_plan.current_sources` gives them; a source recorded earlier is kept: later
    resumes hold the data to it) and when it resumed."""
    if manifest.suite is None:
        manifest.suite = suite
    recorded = {n: DatasetSource.model_validate(src) for n, src in sources.items() if "error" not in src}
    manifest.datasets = {**recorded, **manifest.datasets}
    manifest.resumed_at = [*manifest.resumed_at, now_iso()]
    return manifest


def finish_manifest(manifest: RunManifest, engine_status: dict[str, dict[str, Any]]) -> None:
    """A session's end in its manifest: each engine's entry as the runner left it (``engine_status``: key → its
    status and what it recorded; an engine whose cells all finished before a resume keeps what it recorded
    then) and when the session finished."""
    earlier = {e.key: e for e in manifest.engines}
    manifest.engines = [
        earlier[k].model_copy(update={"status": "done earlier"}) if v == {"status": "done earlier"} and k in earlier
        else EngineEntry.model_validate({"key": k, **v})
        for k, v in engine_status.items()
    ]
    manifest.finished_at = now_iso()


def record_time_breakdown(run_dir: Path, timeline: Timeline, manifest: RunManifest | None = None) -> None:
    """Write the timeline's breakdown (wall: from its start to now) into ``manifest.json``.

    Engine starts, warmups, cells and teacher forcing the runner did not record are estimated from
    this session's files (:func:`specbench.analysis.timing_estimate.engine_spans`)."""
    manifest = manifest if manifest is not None else rundir.read_manifest(run_dir)
    notes = []
    if not timeline.has("cells"):
        timeline.extend(engine_spans(run_dir, since=timeline.started))
        notes.append("engine starts, warmups, cells and teacher forcing: estimated from cells.jsonl and the engine logs")
    if manifest.resumed_at:
        notes.append("a resumed run: the last session only")
    manifest.set_time(timeline.spans or [], timeline.breakdown(notes=notes))
    rundir.write_manifest(run_dir, manifest)
