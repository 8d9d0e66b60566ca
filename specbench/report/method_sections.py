"""Report sections for methods against each other (issue 17): the headline table, K sweeps,
verification spent, and a readable serving table (with its raw CSV).

Built from the typed summary parts (:mod:`specbench.results.parts`) and the
group summaries only; shared by the Markdown and HTML writers.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from typing import Any

from specbench.config.plan import load_label
from specbench.report.document import Block, Para, Refs, Section, Table
from specbench.report.terminal import TAU_ONLY_NOTE, headline_looped, headline_verdict, rounds_said_of
from specbench.results.degeneracy import MARK_NOTE, mark
from specbench.results.fmt import (
    dataset_label,
    fmt_est,
    fmt_load,
    fmt_metric,
    fmt_speedup,
    speed_intervals_note,
)
from specbench.results.parts import HeadlineRow, KSweep, ServingCellRow, ServingComparison
from specbench.results.slices import split_group_id
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate


def _ms(e: Estimate | None) -> str:
    return fmt_est(e, 2, scale=1000.0)


def _slice_order(group_id: str) -> tuple[int, str]:
    """Slices in a sensible order (input lengths by size); the whole group first."""
    s = split_group_id(group_id)[1]
    return (s.input_tokens or 0, s.id)


def _sweep_dataset(s: KSweep) -> str:
    return dataset_label(s.dataset, s.points[0].group_id) if s.points else s.dataset


def _load_of(x: HeadlineRow | KSweep | GroupSummary) -> str:
    return load_label(x.batch_size, x.request_rate)


def _claims(r: HeadlineRow, refs: Refs) -> str:
    out = []
    for c in r.published:
        what = "speedup" if c.metric == "speedup_ratio" else "τ"
        val = f"{c.value:g}–{c.high:g}×" if c.high is not None else f"{c.value:g}×"
        out.append(f"{what} {val} (ref. {refs.mark(c.source)})")
    return "; ".join(out) or "–"


def headline_section(summary: RunSummary, refs: Refs) -> Section | None:
    if not summary.headline:
        return None
    tables: dict[tuple, list[HeadlineRow]] = defaultdict(list)
    for r in summary.headline:
        tables[(r.target, r.dataset, _slice_order(r.method_group), r.temperature, r.request_rate is not None,
                r.request_rate or r.batch_size)].append(r)
    blocks: list[Block] = [Para(
        "Each method against the target's reference method (`compare_to`; default its EAGLE-3), and the "
        "reference against no speculation where the run has it, each at its "
        "best K at that load (highest per-stream tok/s; highest τ where the engine records no timings). Ratios "
        "are paired by prompt over the prompts both measured: speedup ratio = per-stream output tok/s of the "
        "method over the reference's; τ ratio = pooled τ over pooled τ. In a run with speed rounds the two "
        "arms of a prompt share a round, and the speedup ratio is the decode speed ratio (decode tok/s per stream, "
        "1 / TPOT with TPOT = Σ (latency − TTFT) / Σ (output tokens − 1): the prefill, the same target's in both "
        "arms, is left to TTFT), decided by `specbench ab`'s rule: per round "
        "the ratio over the round's shared prompts; shown, their geometric mean and its confidence sequence "
        "(α = 0.01, widened for a spread estimated from few rounds); faster / slower when it lies beyond ±5 %, "
        "same when it lies within, else undecided, over the rounds shown (with how many rounds would decide "
        "at this ratio and spread). With headline speed rounds (`headline:`, docs/speed.md: The headline decides) "
        "the pairs get more rounds on repeats of the prompts until decided, in blocks on freshly started engine "
        "instances, and the unit is an instance's block (the mean of its rounds' log ratios: an instance's own "
        "offset is then spread the rule sees); τ stays the single pass's. An instance's block in which a request "
        "stalled (its time per decoding step over twice its cell's median: the machine paused it) is left out, and "
        "the row says so. A K the paired rule cannot split from "
        "the fastest is a tie (K 1≈3): the row compares the cheapest K of it. In a run of one round (the arms "
        "measured minutes apart): 95 % bootstrap interval over prompts, faster / slower when it excludes 1, else "
        "not distinguishable"
        + (f"; {TAU_ONLY_NOTE}" if any(r.tau_only for r in summary.headline) else "")
        + ". " + speed_intervals_note(summary)
        + (f" {MARK_NOTE}." if any(headline_looped(summary, r) for r in summary.headline) else ""))]
    if summary.extra.headline_blocks:
        blocks.append(Para(f"Headline speed blocks: {summary.extra.headline_blocks}."))
    for key in sorted(tables):
        rows = tables[key]
        r0 = rows[0]
        blocks.append(Para(f"**{r0.target} · {dataset_label(r0.dataset, r0.method_group)} · T={r0.temperature:g} · "
                           f"load {_load_of(r0)}**"))
        blocks.append(Table(
            ["Method", "K", "Against (K)", "n prompts", "Speedup ratio", "τ ratio", "Verdict",
             "Speedup vs baseline (method / ref.)", "Published"],
            [[r.method, str(r.method_k if r.method_k is not None else "–"),
              r.reference + (f" ({r.reference_k})" if r.reference_k is not None else ""), str(r.n_prompts),
              fmt_speedup(r.speedup_ratio), fmt_metric("tau_ratio", r.tau_ratio, unit="×"),
              mark(headline_verdict(r) + rounds_said_of(r), headline_looped(summary, r)),
              f"{fmt_speedup(r.method_speedup)} / {fmt_speedup(r.reference_speedup)}", _claims(r, refs)]
             for r in sorted(rows, key=lambda r: (r.reference != "baseline", r.method))],
        ))
    return Section("Methods against the reference", blocks, anchor="headline")


def k_sweep_section(summary: RunSummary) -> Section | None:
    if not summary.k_sweeps:
        return None
    per_k: list[list[str]] = []
    best: list[list[str]] = []
    looped = False
    for s in summary.k_sweeps:
        best_v = s.best_k.value
        for p in s.points:
            star = " ★" if best_v is not None and p.k == round(best_v) else ""
            loops = summary.rests_on_loops(p.group_id)
            per_k.append([s.target, _sweep_dataset(s), f"{s.temperature:g}", s.method, _load_of(s), f"{p.k}{star}", str(p.n),
                          mark(fmt_metric("tau", p.tau), loops), mark(fmt_speedup(p.speedup), loops), _ms(p.tpot_s),
                          _ms(p.step_time_s)])
        any_loops = summary.rests_on_loops(*(p.group_id for p in s.points))
        looped |= any_loops
        wins = s.best_k_wins
        won = "" if wins is None or wins.value is None else f" (fastest in {round(wins.value * wins.n)}/{wins.n} rounds)"
        best.append([s.target, _sweep_dataset(s), f"{s.temperature:g}", s.method, _load_of(s),
                     mark(fmt_est(s.best_k, 0) + won, any_loops),
                     fmt_est(s.step_time_slope_s, 3, scale=1000.0, signed=True, n_default=None)])
    moves: dict[tuple[str, str, float, str], list[float]] = defaultdict(list)
    for s in summary.k_sweeps:
        if s.best_k.value is not None:
            moves[(s.target, _sweep_dataset(s), s.temperature, s.method)].append(s.best_k.value)
    move_rows = [[t, d, f"{temp:g}", m, ", ".join(f"{v:g}" for v in vs), f"{max(vs) - min(vs):g}"]
                 for (t, d, temp, m), vs in moves.items() if len(vs) > 1]
    blocks: list[Block] = [
        Para("Each method at every K it ran (★ its best K at that load: highest per-stream output tok/s). "
             "Time per decoding step = decode time (latency − TTFT) / verification steps, from each request's "
             "record; TPOT = decode time / (output tokens − 1). A drafter that runs one pass per block keeps its "
             "step time flat in K; EAGLE-3's rises with K (one drafter pass per draft token)."),
        Table(["Target", "Dataset", "T", "Method", "Load", "K", "n", "τ", "Speedup", "TPOT (ms)", "Step time (ms)"],
              per_k, [MARK_NOTE + "; a best K is marked when any of its K's is."] if looped else []),
        Para("Best K (interval: bootstrap over prompts of the argmax) and the least-squares slope of step time "
             "over K (ms per extra draft token; bootstrap over the prompts measured at every K):"),
        Table(["Target", "Dataset", "T", "Method", "Load", "Best K", "Step-time slope (ms/K)"], best),
    ]
    if move_rows:
        blocks += [Para("How far the best K moves between loads (less tuning needed when it stays put):"),
                   Table(["Target", "Dataset", "T", "Method", "Best K by load", "Moves by"], move_rows)]
    by_length: dict[tuple[str, str, float, str, str], list[tuple[int, float]]] = defaultdict(list)
    for s in summary.k_sweeps:
        n = split_group_id(s.points[0].group_id)[1].input_tokens if s.points else None
        if n is not None and s.best_k.value is not None:
            by_length[(s.target, s.dataset, s.temperature, s.method, _load_of(s))].append((n, s.best_k.value))
    length_rows = [[t, d, f"{temp:g}", m, load, ", ".join(f"{v:g} at {n}" for n, v in sorted(vs)),
                    f"{max(v for _, v in vs) - min(v for _, v in vs):g}"]
                   for (t, d, temp, m, load), vs in by_length.items() if len(vs) > 1]
    if length_rows:
        blocks += [Para("Whether the best K moves with context (input tokens):"),
                   Table(["Target", "Dataset", "T", "Method", "Load", "Best K by input length", "Moves by"],
                         length_rows)]
    return Section("K sweeps", blocks, anchor="k-sweeps")


def verification_section(summary: RunSummary) -> Section | None:
    groups = [g for g in summary.whole_groups if g.verification is not None]
    if not groups:
        return None
    parts = ("drafted_per_step", "accepted_per_verified", "wasted_per_emitted")
    rows = [[g.target, dataset_label(g.dataset, g.group_id), g.method, str(g.k if g.k is not None else "–"),
             f"{g.temperature:g}", fmt_load(g),
             *(fmt_metric(f"verification.{p}", getattr(g.verification, p)) for p in parts)]
            for g in groups]
    return Section("Verification spent", [
        Para("Draft tokens the target verified per step, the share of them accepted, and the verified-but-rejected "
             "draft tokens per output token (95% bootstrap intervals over requests). DSpark's confidence head "
             "(`confidence_threshold`) sends fewer drafts to verification: compare it with the same DSpark without."),
        Table(["Target", "Dataset", "Method", "K", "T", "Load", "Drafted / step", "Accepted / verified",
               "Wasted / emitted token"], rows),
    ], anchor="verification")


# --------------------------------------------------------------------------
# serving


def _ms_val(v: float | None) -> str:
    return "–" if v is None else f"{1000 * v:.1f}"


def _ratios(c: ServingComparison | None) -> str:
    """A comparison's TPOT speedup and tok/s ratio, as the analysis stored them."""
    if c is None:
        return "–"
    return " / ".join("–" if v is None else f"{v:.2f}×" for v in (c.tpot_ratio, c.throughput_ratio))


def serving_table(summary: RunSummary) -> Table | None:
    """Per method and load: TTFT / TPOT / ITL p50 and p99 in ms and aggregate output tok/s, with the
    method-vs-reference (the same K when the reference ran it, else its fastest) and method-vs-baseline
    ratios the analysis stored (:class:`~specbench.results.parts.ServingComparison`: TPOT speedup, tok/s
    ratio)."""
    cells = summary.extra.serving_cells
    if not cells:
        return None

    def load(r: ServingCellRow) -> str:
        return f"{r.request_rate:g} req/s" if r.request_rate is not None else f"c={r.concurrency}"

    at: dict[tuple, ServingCellRow] = {}
    for r in cells:  # a method's last repeat at each load
        at[(r.target, r.dataset, r.temperature, load(r), r.method)] = r
    rows = []
    for (t, d, temp, ld, m), r in at.items():
        thr = r.output_throughput
        rows.append([
            str(t), str(d), "–" if temp is None else f"{temp:g}", ld, str(m), str(r.ttft.n or r.num_ok),
            _ms_val(r.ttft.p50), _ms_val(r.ttft.p99), _ms_val(r.tpot.p50), _ms_val(r.tpot.p99),
            _ms_val(r.itl.p50), _ms_val(r.itl.p99), "–" if thr is None else f"{thr:.0f}",
            _ratios(r.vs_reference), _ratios(r.vs_baseline),
        ])
    return Table(["Target", "Dataset", "T", "Load", "Method", "n", "TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)",
                  "TPOT p99 (ms)", "ITL p50 (ms)", "ITL p99 (ms)", "Output tok/s (aggregate)",
                  "vs reference: TPOT speedup / tok/s", "vs baseline: TPOT speedup / tok/s"], rows,
                 ["Aggregate output tok/s = output tokens / the cell's wall time (all streams together), as "
                  "`vllm bench serve` reports it. TPOT speedup = the other cell's pooled TPOT (Σ decode time / "
                  "Σ (tokens − 1)) over this one's (> 1: faster); tok/s = this cell's aggregate tok/s over the "
                  "other's; each against the cell of the same load and repeat. Point ratios; the paired intervals "
                  "are in the headline, results and speedup-by-load tables. The full table is in the CSV beside "
                  "this report."])


def serving_csv(summary: RunSummary) -> str | None:
    """Every serving cell's raw numbers (seconds), one row per cell, for the CSV beside the report."""
    cells = summary.extra.serving_cells
    if not cells:
        return None
    flat: list[dict[str, Any]] = []
    for r in cells:
        row: dict[str, Any] = {}
        for k, v in r.model_dump(mode="json").items():
            if k in ("vs_baseline", "vs_reference"):  # the same columns whether or not there is one
                row.update({f"{k}_{k2}": (v or {}).get(k2) for k2 in ServingComparison.model_fields})
            elif isinstance(v, dict):
                for k2, v2 in v.items():
                    row[f"{k}_{k2}"] = v2
            else:
                row[k] = v
        flat.append(row)
    keys: list[str] = []
    for row in flat:
        keys += [k for k in row if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    w.writerows(flat)
    return buf.getvalue()
