"""What a run will do, decided once: the suite read and expanded into a plan (a new run), or the
suite and plan stored in a run directory (``--resume``).

After this step nothing looks at the suite file again: the runner acts on the plan and its
decisions, and a resumed run takes both from its manifest, so editing the YAML between a stop and
``--resume`` changes nothing. Local data a resumed run would read again must be the data the run
started with (the sha256 the manifest recorded), else the run is refused before any engine starts.

:func:`engine_configs` is the plan as ``--dry-run`` shows it (each engine's exact configuration).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbench import datasets
from specbench.config.plan import Plan, cell_summary, expand, with_decisions
from specbench.config.suite import Suite, load_suite
from specbench.engines.factory import resolve_engine
from specbench.engines.vllm_args import vllm_serve_command
from specbench.errors import SpecbenchError
from specbench.results import rundir
from specbench.results.manifest import RunManifest


class DataChanged(SpecbenchError):
    """Data a resumed run would read differs from what the run started with (lines: one per dataset)."""


@dataclass(frozen=True)
class RunPlan:
    """A run's suite and plan (with its decisions), and the run directory it continues when resumed.

    ``sources``: where each dataset's rows come from now (``datasets.source_of``), for a resumed
    run whose manifest lacks them (recorded then)."""

    suite: Suite
    plan: Plan
    resume: Path | None = None
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def n_cells(self) -> int:
        """How many cells the run has (a progress bar's total)."""
        return len(self.plan.cells)


def plan_run(suite: Suite) -> RunPlan:
    """A new run of ``suite`` (loaded, ``--num-speculative-tokens`` applied): its one expansion."""
    return RunPlan(suite=suite, plan=expand(suite))


def plan_resume(run_dir: Path) -> RunPlan:
    """The stored suite and plan of the run in ``run_dir``, its data checked against the manifest.

    A manifest without a stored suite (written before it kept one) reads the suite file it names,
    once; the run then stores it. Raises :class:`DataChanged` when a dataset's sha256 differs
    from the recorded one, :class:`~specbench.results.rundir.StoreError` when the directory holds
    no resumable run."""
    run_dir = Path(run_dir)
    manifest = rundir.read_manifest(run_dir)
    suite = stored_suite(manifest, run_dir)
    if manifest.plan is None:
        raise rundir.StoreError(f"{run_dir}: the manifest holds no plan: this run cannot be resumed")
    sources = current_sources(suite)
    changed = changed_data({k: v.model_dump(mode="json") for k, v in manifest.datasets.items()}, sources)
    if changed:
        raise DataChanged([f"{run_dir}: cannot resume: {line}" for line in changed])
    return RunPlan(suite=suite, plan=with_decisions(manifest.plan, suite), resume=run_dir, sources=sources)


def stored_suite(manifest: RunManifest, run_dir: Path) -> Suite:
    """The suite a run was planned from, as its manifest stores it (else read from the file it names)."""
    path = manifest.suite_path
    if manifest.suite is None:
        if not path:
            raise rundir.StoreError(f"{run_dir}: the manifest stores no suite and names no suite file")
        return load_suite(path)
    suite = manifest.suite.model_copy()
    suite.source_path = path  # relative dataset paths resolve against the suite's directory
    return suite


def current_sources(suite: Suite) -> dict[str, dict[str, Any]]:
    """Where each of the suite's datasets comes from now, with its file's sha256 (a missing file: an error)."""
    base = Path(suite.source_path).parent if suite.source_path else Path.cwd()
    out: dict[str, dict[str, Any]] = {}
    for d in suite.datasets:
        try:
            out[d.name] = datasets.source_of(d, base)
        except OSError as exc:
            out[d.name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def changed_data(recorded: dict[str, Any], now: dict[str, dict[str, Any]]) -> list[str]:
    """One line per dataset whose recorded sha256 differs from its source's now (or whose file is gone)."""
    out = []
    for name, then in recorded.items():
        sha = (then or {}).get("sha256") if isinstance(then, dict) else None
        if not sha:
            continue  # the hub, or a manifest that recorded none: nothing to hold it to
        cur = now.get(name) or {}
        where = then.get("location") or name
        if "error" in cur:
            out.append(f"dataset {name!r} ({where}) cannot be read now: {cur['error']}")
        elif cur.get("sha256") != sha:
            out.append(f"dataset {name!r} ({where}) changed since the run started: sha256 {sha[:12]}… then, "
                       f"{str(cur.get('sha256'))[:12]}… now; restore it or start a new run")
    return out


def engine_configs(planned: RunPlan, platform: str, assets_factory: Any = None) -> list[dict[str, Any]]:
    """Every engine of the plan as it will start on ``platform`` (vLLM arguments, environment, server
    command), its cells in words and the suite's published references for it (``--dry-run``)."""
    suite, plan = planned.suite, planned.plan
    out = []
    for cfg in plan.engines:
        res = resolve_engine(cfg, platform, assets_factory)
        cells = plan.cells_for(cfg.key)
        out.append(
            {
                "engine": cfg.key,
                "kind": cfg.target.engine,
                "method": cfg.method.method,
                "speculative_config": res.engine_kwargs.get("speculative_config"),
                "llm_kwargs": res.engine_kwargs,
                "env": res.env,
                "server_command": vllm_serve_command(cfg, res.engine_kwargs, platform, res.env),
                "cells": len(cells),
                "cell_lines": cell_summary(cells, suite),
                "references": [
                    r.model_dump(mode="json") for r in suite.references
                    if r.target == cfg.target.name
                    and r.method in (cfg.method.label, cells[0].method_family if cells else cfg.method.label)
                    and r.k in (None, cfg.method.num_speculative_tokens)
                ],
            }
        )
    return out
