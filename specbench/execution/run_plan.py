"""What a run will do, decided once: the suite read and expanded into a plan (a new run), or the
suite and plan stored in a run directory (``--resume``).

After this step nothing looks at the suite file again: the runner acts on the plan and its
decisions, and a resumed run takes both from its manifest, so editing the YAML between a stop and
``--resume`` changes nothing. Local data a resumed run would read again must be the data the run
started with (the sha256 the manifest recorded), else the run is refused before any engine starts.

:func:`engine_configs` is the plan as ``--dry-run`` shows it (each engine's exact configuration).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specbench import datasets
from specbench.config.arms import pairs_taking_turns, with_sleep_mode
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


def plan_run(suite: Suite, platform: str | None = None) -> RunPlan:
    """A new run of ``suite`` (loaded, ``--num-speculative-tokens`` applied): its one expansion. On a GPU, a
    suite with headline speed rounds whose pairs do not fit on it together serves them with vLLM's sleep mode
    (they take turns in the blocks: execution.engine_turns)."""
    from specbench.execution.driver import detect_platform

    if suite.headline is not None and (platform or detect_platform()) == "cuda":
        suite = with_sleep_mode(suite, pairs_taking_turns(suite))
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


def with_headline_budget(planned: RunPlan, budget_s: float) -> RunPlan:
    """``planned`` with its headline speed rounds bounded by ``budget_s`` seconds (``--budget``); a suite without
    ``headline:`` is refused (bad input)."""
    decisions = planned.plan.decisions()
    if decisions.headline is None:
        raise ValueError(f"suite {planned.suite.name!r} has no headline speed rounds (headline:) to bound")
    spec = decisions.headline.model_copy(update={"budget_s": float(budget_s)})
    plan_ = planned.plan.model_copy(update={"run": decisions.model_copy(update={"headline": spec})})
    return replace(planned, plan=plan_)


#: ``--dry-run``'s assumptions for the headline's expected time (stated in its lines): seconds per engine start
#: and output tok/s per stream, by platform (CPU: the zoo's weight-bound target at batch 1, docs/data.md; CUDA: an
#: 8B target on one H100-class GPU). A run measures; these only size the plan.
ASSUMED_START_S = {"cpu": 5.0, "cuda": 90.0}
ASSUMED_TOKENS_PER_S = {"cpu": 40.0, "cuda": 100.0}


def headline_plan(planned: RunPlan, platform: str | None = None) -> list[str]:
    """Per headline pair (``--dry-run``): its rounds, engine instances and the time it may take at the cap
    (``platform``: default the detected one)."""
    from specbench.execution.driver import detect_platform

    platform = platform or detect_platform()
    decisions = planned.plan.decisions()
    spec, suite = decisions.headline, planned.suite
    if spec is None:
        return [f"one engine instance per arm, {suite.rounds} round(s) over the suite's prompts (no headline: "
                "speed rounds); the headline decides on them or stays undecided"]
    start_s, rate = ASSUMED_START_S.get(platform, 60.0), ASSUMED_TOKENS_PER_S.get(platform, 50.0)
    out = [f"{spec.instances} engine instances per arm at most: the single pass's, then blocks of "
           f"{spec.rounds_per_instance} round(s) of {spec.batches_per_round} batches per engine on fresh instances, "
           f"until the headline's rule decides (margin 5 %, α 0.01) or "
           + (f"the budget ({spec.budget_s:.0f} s) ends;" if spec.budget_s else "the instances end (no budget);")
           + f" expected time at the cap assumes {start_s:.0f} s per engine start and {rate:.0f} output tok/s "
           "per stream"]
    pairs: dict[tuple, list] = {}
    plain = {c.baseline_group_key for c in planned.plan.cells if c.method_kind == "baseline"}
    untimed = {t.name for t in suite.targets if t.engine == "reference"}  # the simulator records no timings
    for c in planned.plan.cells:
        if (c.method_kind != "baseline" and c.lossy is None and c.target in decisions.reference_of and c.repeat == 0
                and c.target not in untimed):
            pairs.setdefault(c.baseline_group_key, []).append(c)
    for key, cells in pairs.items():
        ref = decisions.reference_of[key[0]]
        fams = sorted({c.method_family for c in cells} - {ref})
        c0 = cells[0]
        if key in plain and any(c.method_family == ref for c in cells):
            fams = [*fams, f"{ref} (the anchor row: against baseline)"]
        batch_s = decisions.max_tokens / rate
        speed_rounds = (spec.instances - 1) * spec.rounds_per_instance
        row_s = (spec.instances - 1) * 2 * start_s + speed_rounds * spec.batches_per_round * 2 * batch_s
        out += [f"{c0.target} {c0.dataset} T{c0.temperature:g} load {c0.load_label}: {f}"
                + ("" if f.endswith(")") else f" against {ref}") + ": "
                f"{suite.rounds} rounds in the single pass, then up to {speed_rounds} speed rounds on "
                f"{spec.instances - 1} fresh instances (≤ {row_s / 60:.1f} min for the pair alone)" for f in fams]
    return out
