"""Report section: every method against input length (``input_tokens`` slices, issue 25).

One table per (target, dataset, temperature, load) whose groups are sliced by
input length: per method and length, τ, the acceptance rate at each draft
position, the time per decoding step, TPOT and the speedup over no
speculation (each with its 95% interval), and the τ and speedup ratios over
the reference method (EAGLE-3 unless ``compare_to`` says otherwise) at that
length, from the headline rows. Numbers come from the summary; nothing is
computed here.
"""

from __future__ import annotations

from collections import defaultdict

from specbench.report.document import Block, Para, Section, Table
from specbench.results.degeneracy import MARK_NOTE, mark
from specbench.results.fmt import fmt_est, fmt_load, fmt_speedup
from specbench.results.parts import HeadlineRow
from specbench.results.summary import GroupSummary, RunSummary


def input_tokens(g: GroupSummary) -> int | None:
    """The requested input length of a group's slice (None: not sliced by length)."""
    return g.slice.input_tokens if g.slice is not None else None


def _positions(g: GroupSummary) -> str:
    vals = [f"{e.value:.2f}" for e in g.per_position if e.value is not None]
    return " · ".join(vals) if vals else "–"


def _ms(g: GroupSummary, field: str) -> str:
    return fmt_est(getattr(g, field), 2, scale=1000.0)


def length_rows(summary: RunSummary) -> dict[tuple, list[GroupSummary]]:
    """Groups sliced by input length, keyed by (target, dataset, T, load), in length order."""
    tables: dict[tuple, list[GroupSummary]] = defaultdict(list)
    for g in summary.groups:
        if input_tokens(g) is not None and g.status in ("ok", "partial"):
            tables[(g.target, g.dataset, g.temperature, g.request_rate is not None, g.request_rate or g.batch_size)
                   ].append(g)
    for rows in tables.values():
        rows.sort(key=lambda g: (g.method_kind == "baseline", g.method, input_tokens(g) or 0))
    return dict(sorted(tables.items()))


def input_length_section(summary: RunSummary) -> Section | None:
    tables = length_rows(summary)
    if not tables:
        return None
    ratios: dict[str, HeadlineRow] = {r.method_group: r for r in summary.headline}
    blocks: list[Block] = [Para(
        "Each method at every input length it ran (tokens of the user message, built for the target's tokenizer; "
        "the prompt adds the chat template's fixed overhead). τ = 1 + accepted / drafts; acceptance by position = "
        "accepted at position i / drafts; step time = decode time / verification steps; TPOT = decode time / "
        "(output tokens − 1); speedup over no speculation at the same length. Ratios over the reference method "
        "(`compare_to`, default EAGLE-3) are paired by prompt at that length. 95% intervals in brackets.")]
    looped = False
    for rows in tables.values():
        g0 = rows[0]
        ref = next((ratios[g.group_id].reference for g in rows if g.group_id in ratios), None)
        blocks.append(Para(f"**{g0.target} · {g0.dataset} · T={g0.temperature:g} · load {fmt_load(g0)}**"
                           + (f" (ratios over {ref})" if ref else "")))
        body = []
        for g in rows:
            h = ratios.get(g.group_id)
            own = summary.rests_on_loops(g.group_id)
            pair = summary.rests_on_loops(g.group_id, h.reference_group) if h else False
            looped |= own or pair
            body.append([g.method, str(input_tokens(g)), str(g.n_requests), mark(fmt_est(g.tau, 2), own), _positions(g),
                         _ms(g, "step_time_s"), _ms(g, "tpot_s"), mark(fmt_speedup(g.speedup), own),
                         mark(fmt_est(h.tau_ratio, 2, unit="×"), pair) if h else "–",
                         mark(fmt_speedup(h.speedup_ratio), pair) if h else "–"])
        blocks.append(Table(["Method", "Input tokens", "n", "τ", "Acceptance by position", "Step time (ms)",
                             "TPOT (ms)", "Speedup", "τ ratio", "Speedup ratio"], body))
    if looped:
        blocks.append(Para(MARK_NOTE + " (a ratio: the method's group or the reference's)."))
    return Section("Input length", blocks, anchor="input-length")
