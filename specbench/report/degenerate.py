"""The report's "Outputs behind the numbers" section: per group, the share of degenerate outputs
(repetition loops, :mod:`specbench.results.degeneracy`) and of short ones, and τ, tokens per step
and speedup on the requests that are not degenerate beside the pooled ones, each with its n.

Listed: every group with at least one degenerate request; none, no section. Formatting only.
"""

from __future__ import annotations

from specbench.report.document import Para, Section, Table
from specbench.results import degeneracy
from specbench.results.degeneracy import MARK_NOTE, mark
from specbench.results.fmt import dataset_label, fmt_load, fmt_metric, fmt_pct, fmt_speedup
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate


def _n(e: Estimate | None) -> str:
    """'(n=12)': the n an estimate rests on ('–' without a value)."""
    return "–" if e is None or e.value is None else f"(n={e.n})"


def _pair(metric: str, pooled: Estimate | None, kept: Estimate | None, speed: bool = False) -> str:
    """'pooled (n) → non-degenerate (n)'."""
    def one(e: Estimate | None) -> str:
        text = fmt_speedup(e) if speed else fmt_metric(metric, e)
        return text if text == "–" else f"{text} {_n(e)}"

    return f"{one(pooled)} → {one(kept)}"


def _with_loops(summary: RunSummary) -> list[GroupSummary]:
    out = []
    for g in summary.whole_groups:
        share = g.metrics.get("degenerate_share")
        if share is not None and share.value:
            out.append(g)
    return sorted(out, key=lambda g: (g.target, g.dataset, g.temperature, g.method_kind != "baseline", g.method))


def degenerate_section(summary: RunSummary) -> Section | None:
    groups = _with_loops(summary)
    if not groups:
        return None
    rows = []
    for g in groups:
        nd = g.non_degenerate
        rows.append([
            g.target, dataset_label(g.dataset, g.group_id), g.method, str(g.k if g.k is not None else "–"),
            f"{g.temperature:g}", fmt_load(g), str(g.n_requests),
            mark(fmt_pct(g.metrics.get("degenerate_share")), summary.rests_on_loops(g.group_id)),
            fmt_pct(g.metrics.get("short_share")),
            "–" if g.method_kind == "baseline" else _pair("tau", g.tau, nd.tau if nd else None),
            "–" if g.method_kind == "baseline" else _pair("tokens_per_step", g.tokens_per_step,
                                                          nd.tokens_per_step if nd else None),
            "–" if g.method_kind == "baseline" else _pair("speedup", g.speedup, nd.speedup if nd else None, True),
        ])
    return Section("Outputs behind the numbers", [
        Para(f"A request is degenerate when its output ends in a repetition loop (period ≤ {degeneracy.MAX_PERIOD} "
             f"tokens, two periods or more) covering more than half of it; outputs under {degeneracy.MIN_TOKENS} "
             "tokens are short, judged by neither measure. A loop is trivially drafted: τ near K+1 on looping "
             "outputs measures the loop, not the drafter. Shares of the group's requests (Wilson 95% intervals); "
             "beside the pooled τ, tokens per step and speedup, the same on the requests that are not "
             "degenerate (the speedup: prompts where neither arm's output is), each with its n. Groups with no "
             "degenerate request are not listed."
             + (f" {MARK_NOTE}." if summary.rests_on_loops(*(g.group_id for g in groups)) else "")),
        Table(["Target", "Dataset", "Method", "K", "T", "Load", "n", "Degenerate", "Short",
               "τ: pooled → non-degenerate", "Tokens per step: pooled → non-degenerate",
               "Speedup: pooled → non-degenerate"], rows),
    ], anchor="degenerate")
