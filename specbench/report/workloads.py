"""Report sections for workloads (issue 24): the category matrix and the per-turn table.

Built from the summary's category matrix (:class:`~specbench.results.parts.CategoryCell`)
and the groups' turn slices; shared by the Markdown and HTML writers. Numbers are
formatted here, never computed.
"""

from __future__ import annotations

from collections import defaultdict

from specbench.config.plan import load_label
from specbench.report.document import Block, Para, Section, Table
from specbench.results.degeneracy import MARK_NOTE, mark
from specbench.results.fmt import fmt_est, fmt_metric, fmt_pct, fmt_speedup
from specbench.results.parts import CategoryCell
from specbench.results.slices import split_group_id
from specbench.results.summary import GroupSummary, RunSummary


def matrix_tables(summary: RunSummary) -> dict[tuple, list[CategoryCell]]:
    """The matrix's cells per (target, dataset, T, load), in a fixed order."""
    out: dict[tuple, list[CategoryCell]] = defaultdict(list)
    for c in summary.extra.category_matrix:
        out[(c.target, c.dataset, c.temperature, c.request_rate is not None, c.request_rate or c.batch_size)].append(c)
    return dict(sorted(out.items(), key=lambda kv: kv[0]))


def row_label(c: CategoryCell) -> str:
    return c.method if c.k is None or c.method.endswith(f"k{c.k}") else f"{c.method}·K{c.k}"


def _cell(c: CategoryCell) -> str:
    if c.too_few:
        value = fmt_metric("tau", c.tau.model_copy(update={"ci_low": None, "ci_high": None}) if c.tau else None)
        ratio = fmt_speedup(c.tau_ratio.model_copy(update={"ci_low": None, "ci_high": None})) if c.tau_ratio else ""
        return f"{value}{' · ' + ratio if ratio and ratio != '–' else ''} (n={c.n_prompts}: too few prompts for an interval)"
    ratio = fmt_speedup(c.tau_ratio) if c.tau_ratio is not None else ""
    return fmt_metric("tau", c.tau) + (f" · {ratio}" if ratio and ratio != "–" else "")


def category_section(summary: RunSummary) -> Section | None:
    tables = matrix_tables(summary)
    if not tables:
        return None
    blocks: list[Block] = [Para(
        "τ per prompt category [95% interval] · its ratio to the reference method's τ on the same prompts "
        "[95% interval], paired by prompt (bootstrap over prompts; the reference at its best K). A category with "
        "too few prompts shows its value without an interval and says so. Rows: method·K; the column header "
        "gives each category's prompts.")]
    looped = False
    for cells in tables.values():
        c0 = cells[0]
        cats = sorted({c.category for c in cells})
        n_of = {c.category: c.n_prompts for c in cells}
        rows: dict[str, dict[str, str]] = defaultdict(dict)
        for c in cells:
            loops = summary.rests_on_loops(c.group_id, c.reference_group)
            looped |= loops
            rows[row_label(c)][c.category] = mark(_cell(c), loops)
        blocks.append(Para(f"**{c0.target} · {c0.dataset} · T={c0.temperature:g} · load "
                           f"{load_label(c0.batch_size, c0.request_rate)}** (reference: {c0.reference or '–'})"))
        blocks.append(Table(["Method·K"] + [f"{cat} (n={n_of[cat]})" for cat in cats],
                            [[label] + [r.get(cat, "–") for cat in cats] for label, r in sorted(rows.items())]))
    if looped:
        blocks.append(Para(MARK_NOTE + " (the category's slice of the method or of the reference)."))
    return Section("Categories", blocks, anchor="categories")


def _turn_slices(summary: RunSummary) -> dict[str, list[GroupSummary]]:
    out: dict[str, list[GroupSummary]] = defaultdict(list)
    for g in summary.groups:
        if g.slice is not None and g.slice.turn is not None and g.slice.category is None:
            out[split_group_id(g.group_id)[0]].append(g)
    return out


def _sampled(s: GroupSummary) -> str:
    """A turn's sampled test: verdict, p-value and its n (requests, tokens)."""
    t = s.equivalence.sampled if s.equivalence is not None else None
    if t is None:
        return "–"
    p = f"p={t.pvalue:.3g}; " if t.pvalue is not None else ""
    return f"{t.verdict} ({p}n={t.n_requests or 0} requests, {t.n_tokens or 0} tokens)"


def turn_section(summary: RunSummary) -> Section | None:
    turns = _turn_slices(summary)
    if not turns:
        return None
    sampled = any(s.equivalence is not None and s.equivalence.sampled is not None for ss in turns.values() for s in ss)
    rows = []
    for gid in sorted(turns):
        for s in sorted(turns[gid], key=lambda s: s.slice.turn if s.slice and s.slice.turn else 0):
            t1 = s.turn1_identical
            judged = f"{t1.identical} of {t1.conversations}" if t1 else "–"
            rows.append([gid, str(s.slice.turn if s.slice else "–"), str(s.n_requests), fmt_metric("tau", s.tau),
                         fmt_est(s.tpot_s, 2, scale=1000.0), fmt_speedup(s.speedup), fmt_pct(s.greedy_match),
                         judged] + ([_sampled(s)] if sampled else []))
    note = (" The sampled test (T > 0) is run on each turn's samples alone, every conversation included: it is "
            "conditional on the prompt, which holds the method's own earlier replies." if sampled else "")
    return Section("Conversation turns", [
        Para("Each conversation ran turn by turn, a later turn's history holding the same engine's own reply to "
             "the turn before. Speedup and greedy identity of a later turn are judged only on the conversations "
             "whose turn 1 was token-identical to the baseline's (column 'Judged': how many of how many)." + note),
        Table(["Group", "Turn", "Requests", "τ", "TPOT (ms)", "Speedup", "Greedy identical",
               "Judged (turn 1 identical)"] + (["Sampled test"] if sampled else []), rows)], anchor="turns")
