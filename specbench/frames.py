"""A run as pandas DataFrames, for notebooks: ``specbench.load(RUN_DIR)``.

Three tables, all built from the run's files (nothing is recomputed here
that ``summary.json`` does not already hold):

- ``requests``: one row per recorded request (the latest record of each
  cell × prompt × sample × repeat), with its cell's target, method, K,
  dataset, temperature and load, token counts, timings and per-request
  spec-decode counters (``num_drafts`` … ``tau``; NaN where the engine could
  not attribute them to a request), and whether its output is ``degenerate`` (a
  repetition loop; ``output_class``: short, degenerate or varied; None for an error:
  :mod:`specbench.results.degeneracy`);
- ``cells``: one row per cell with its latest status and the counter deltas;
- ``groups``: one row per summary group (repeats pooled): each estimate as
  ``<metric>``, ``<metric>_lo``, ``<metric>_hi`` and ``<metric>_n`` (the share of
  degenerate outputs as ``degenerate_share``; τ, tokens per step and speedup on the
  others as ``non_degenerate.tau`` …; under a suite's SLOs ``goodput`` and ``goodput_share``);
- ``goodput``: one row per method and load of a suite with ``slo:``: its goodput ratio to no speculation
  (``ratio``, ``ratio_lo``, ``ratio_hi``, ``ratio_n``), the verdict, the rounds it rests on, and its curve's
  ``raises_up_to`` / ``stops_at`` (the load where speculation stops raising goodput);
- ``acceptance_along_output``: one row per speculative group and bucket of output positions: the acceptance
  rate of the steps whose first drafted token lies in it (``rate``, ``rate_lo``, ``rate_hi``, ``rate_n``:
  requests) with its steps, accepted and drafted tokens;
- ``step_shares``: one row per group timed by phase (the ``step-phase-timing`` engine patch): per decoding step
  the verification, drafting, step, untimed and engine-step milliseconds and the drafting share (each as
  ``<name>``, ``_lo``, ``_hi``, ``_n``: steps), the drafter's MiB and the engine's KV tokens (and the share lost);
- ``k_by_length``: one row per (method, batch size, input length) of a K sweep over both: the best K (and its
  tie), the batch-size-only schedule's K, the decode speed at that K over the best K's (``speed_ratio`` …) and
  the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from specbench import api
from specbench.analysis import metrics
from specbench.results import counters, rundir
from specbench.results import metric_catalog as catalog
from specbench.results.degeneracy import judge
from specbench.results.manifest import RunManifest
from specbench.results.slices import SLICE_KEYS
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate

CELL_COLUMNS = ("target", "method", "method_kind", "k", "dataset", "temperature", "batch_size", "request_rate")


def estimate_columns() -> tuple[str, ...]:
    """The groups frame's estimate columns: the catalogue's history metrics held as one Estimate per group
    (a field of its own, or computed from its declaration)."""
    return tuple(m.name for m in catalog.history_metrics()
                 if m.indexed is None and not m.verdict and (m.compute is not None or _holds_estimate(m.summary_field)))


def _holds_estimate(field: str) -> bool:
    """Whether a group's field (dotted: a nested part's) holds one Estimate."""
    model: Any = GroupSummary
    head, _, rest = field.partition(".")
    while rest:
        model = model.model_fields[head].annotation
        model = next(a for a in getattr(model, "__args__", (model,)) if a is not type(None))
        head, _, rest = rest.partition(".")
    return bool(model.model_fields[head].annotation == (Estimate | None))


@dataclass
class RunFrames:
    run_dir: Path
    manifest: RunManifest
    requests: pd.DataFrame
    cells: pd.DataFrame
    groups: pd.DataFrame
    goodput: pd.DataFrame = field(default_factory=pd.DataFrame)
    acceptance_along_output: pd.DataFrame = field(default_factory=pd.DataFrame)
    step_shares: pd.DataFrame = field(default_factory=pd.DataFrame)
    k_by_length: pd.DataFrame = field(default_factory=pd.DataFrame)


def _counter_columns(c: Any) -> dict[str, Any]:
    if c is None:
        return {"num_drafts": None, "num_draft_tokens": None, "num_accepted_tokens": None, "tau": None}
    return {"num_drafts": c.num_drafts, "num_draft_tokens": c.num_draft_tokens,
            "num_accepted_tokens": c.num_accepted_tokens, "tau": counters.counters_tau(c)}


def requests_frame(manifest: RunManifest, records: list,
                   categories: dict[tuple[str, str], str] | None = None) -> pd.DataFrame:
    """One row per request; ``categories`` ((dataset, prompt id) → category, from ``prompts.jsonl``) adds
    its prompt's category, and a conversation's turns carry their conversation id and turn."""
    categories = categories or {}
    cells = {c.cell_id: c for c in manifest.plan.cells} if manifest.plan else {}
    rows = []
    for r in metrics.unique_requests(records):
        cell = cells.get(r.cell_id)
        rows.append({
            "cell_id": r.cell_id, **{k: getattr(cell, k) if cell else None for k in CELL_COLUMNS},
            "prompt_id": r.prompt_id,
            "category": categories.get((cell.dataset, r.conversation_id or r.prompt_id)) if cell else None,
            "conversation_id": r.conversation_id, "turn": r.turn,
            "sample_index": r.sample_index, "repeat": r.repeat, "seed": r.seed,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.num_output_tokens,
            "finish_reason": r.finish_reason, "latency_s": r.latency_s, "ttft_s": r.ttft_s,
            "error": r.error, **_counter_columns(r.spec), **_judged(r), "output_text": r.output_text,
        })
    return pd.DataFrame(rows)


def _judged(r: Any) -> dict[str, Any]:
    """``degenerate`` and ``output_class`` of a request's output (None for one that errored)."""
    if r.error is not None:
        return {"degenerate": None, "output_class": None}
    j = judge(r.output_token_ids)
    return {"degenerate": j.degenerate, "output_class": j.output_class}


def cells_frame(manifest: RunManifest, cell_records: list) -> pd.DataFrame:
    latest = metrics.latest_cell_records(cell_records)
    rows = []
    for c in manifest.plan.cells if manifest.plan else []:
        rec = latest.get(c.cell_id)
        rows.append({
            "cell_id": c.cell_id, **{k: getattr(c, k) for k in CELL_COLUMNS}, "repeat": c.repeat,
            "status": rec.status if rec else "not run", "reason": rec.reason if rec else None,
            "num_requests": rec.num_requests if rec else 0, "wall_time_s": rec.wall_time_s if rec else None,
            **_counter_columns(rec.counters if rec else None),
        })
    return pd.DataFrame(rows)


def groups_frame(summary: RunSummary) -> pd.DataFrame:
    """One row per group; a run with sliced groups gets one column per slice key (None: not sliced on it)."""
    sliced = any(g.slice is not None for g in summary.groups)
    rows, columns = [], estimate_columns()
    for g in summary.groups:
        row: dict[str, Any] = {
            "group_id": g.group_id, "target": g.target, "method": g.method, "method_kind": g.method_kind,
            "k": g.k, "dataset": g.dataset, "temperature": g.temperature, "batch_size": g.batch_size,
            "request_rate": g.request_rate,
            **({k: getattr(g.slice, k) if g.slice else None for k in SLICE_KEYS} if sliced else {}),
            "status": g.status, "n_requests": g.n_requests,
        }
        for name in columns:
            row.update(_estimate_columns(name, g.held(name)))
        rows.append(row)
    return pd.DataFrame(rows)


def _estimate_columns(name: str, est: Estimate | None) -> dict[str, Any]:
    """``name``, ``name_lo``, ``name_hi``, ``name_n`` of one estimate."""
    return {name: est.value if est else None, f"{name}_lo": est.ci_low if est else None,
            f"{name}_hi": est.ci_high if est else None, f"{name}_n": est.n if est else None}


def goodput_frame(summary: RunSummary) -> pd.DataFrame:
    """One row per goodput point: a method's goodput over the baseline's at one load (empty without SLOs)."""
    gp = summary.extra.goodput
    rows = [{"target": c.target, "dataset": c.dataset, "temperature": c.temperature, "slice": c.slice_id,
             "method": c.method, "method_kind": c.method_kind, "k": c.k, "axis": c.axis,
             "batch_size": p.batch_size, "request_rate": p.request_rate, "group_id": p.group_id,
             "baseline_group": p.baseline_group, **_estimate_columns("ratio", p.ratio), "verdict": p.verdict,
             "rounds": p.rounds, "raises_up_to": c.raises_up_to, "stops_at": c.stops_at}
            for c in (gp.curves if gp is not None else []) for p in c.points]
    return pd.DataFrame(rows)


def output_acceptance_frame(summary: RunSummary) -> pd.DataFrame:
    """One row per speculative group and bucket of output positions (empty without step traces)."""
    rows = [{"group_id": a.group_id, "target": a.target, "method": a.method, "method_kind": a.method_kind, "k": a.k,
             "dataset": a.dataset, "temperature": a.temperature, "batch_size": a.batch_size,
             "request_rate": a.request_rate, "bucket_start": b.start, "bucket_end": b.end,
             **_estimate_columns("rate", b.rate), "steps": b.steps, "requests": b.requests,
             "accepted": b.accepted, "drafted": b.drafted, "past_training_from": a.past_training_from}
            for a in summary.extra.acceptance_along_output for b in a.buckets]
    return pd.DataFrame(rows)


def step_share_frame(summary: RunSummary) -> pd.DataFrame:
    """One row per group timed by phase (empty when no engine was)."""
    ests = ("forward_ms", "sample_ms", "bookkeeping_ms", "verification_ms", "draft_ms", "step_ms", "untimed_ms",
            "draft_share", "engine_step_ms")
    rows = [{"group_id": r.group_id, "target": r.target, "dataset": r.dataset, "temperature": r.temperature,
             "method": r.method, "k": r.k, "batch_size": r.batch_size,
             "steps": r.steps, "prefill_steps": r.prefill_steps,
             **{k: v for name in ests for k, v in _estimate_columns(name, getattr(r, name)).items()},
             "draft_weights_mib": r.draft_weights_mib, "kv_cache_tokens": r.kv_cache_tokens,
             "kv_tokens_lost": r.kv_tokens_lost}
            for r in summary.extra.step_shares]
    return pd.DataFrame(rows)


def k_by_length_frame(summary: RunSummary) -> pd.DataFrame:
    """One row per (method, batch size, input length) of a K sweep over both (empty without one)."""
    rows = [{**r.model_dump(exclude={"speed_ratio", "best_tie", "ks"}), "ks": tuple(r.ks),
             "best_tie": tuple(r.best_tie), **_estimate_columns("speed_ratio", r.speed_ratio)}
            for r in summary.extra.k_by_length]
    return pd.DataFrame(rows)


def load(run_dir: str | Path) -> RunFrames:
    """Load a run directory (``results/<suite>/<run-id>``) as DataFrames.

    Reads ``summary.json`` when present, else rebuilds it (``specbench analyze``).
    """
    run_dir = Path(run_dir)
    manifest = rundir.read_manifest(run_dir)
    summary = api.load_summary(run_dir)
    return RunFrames(
        run_dir=run_dir,
        manifest=manifest,
        requests=requests_frame(manifest, rundir.read_requests(run_dir), rundir.prompt_categories(run_dir)),
        cells=cells_frame(manifest, rundir.read_cells(run_dir)),
        groups=groups_frame(summary),
        goodput=goodput_frame(summary),
        acceptance_along_output=output_acceptance_frame(summary),
        step_shares=step_share_frame(summary),
        k_by_length=k_by_length_frame(summary),
    )
