"""The report's "K by batch size and input length" section: per method, batch size and input length the K that
decodes fastest, the K a batch-size-only schedule gives, and what that schedule gives up there (renders; the
numbers are :mod:`specbench.analysis.k_by_length`'s)."""

from __future__ import annotations

from specbench.report.document import Block, Para, Section, Table
from specbench.results.fmt import fmt_speedup
from specbench.results.k_length_cell import KLengthCell
from specbench.results.summary import RunSummary

DEFINITION = (
    "Per batch size and input length, the K that decodes fastest (lowest pooled TPOT; the Ks the headline's rule "
    "does not find slower tie, and the cheapest of a tie is taken, shown as 1≈2) and the K a schedule keyed on "
    "batch size alone gives (vLLM's `num_speculative_tokens_per_batch_size`: the same choice over every length's "
    "requests of that batch size pooled). **Speed at the batch K**: decode speed (1 / TPOT) at the schedule's K "
    "over the best K's at this length, paired by speed round (the rule's confidence sequence, α = 0.01, over its "
    "units: rounds, or engine instances); *slower* beyond 5 %: the schedule loses speed here; *same K*: it picks "
    "the best K here.")


def k_length_lines(rows: list[KLengthCell]) -> list[list[str]]:
    """One line per cell: batch size, length, Ks, best K, the schedule's K, the ratio and the verdict."""
    out = []
    for r in sorted(rows, key=lambda r: (r.batch_size, r.input_tokens)):
        best = "≈".join(map(str, r.best_tie)) if len(r.best_tie) > 1 else str(r.best_k)
        said = r.verdict + (f" ({r.rounds} rounds" + (f" on {r.instances} instances" if (r.instances or 1) > 1
                                                     else "") + ")" if r.rounds else "")
        out.append([str(r.batch_size), str(r.input_tokens), ",".join(map(str, r.ks)), best, str(r.batch_k),
                    "1× (same K)" if r.verdict == "same K" else fmt_speedup(r.speed_ratio), said])
    return out


HEADERS = ["Batch", "Input tokens", "Ks", "Best K", "Batch-only K", "Speed at the batch K", "Verdict"]


def k_length_section(summary: RunSummary) -> Section | None:
    """The section, or None for a run without a K sweep over lengths and batch sizes."""
    rows = summary.extra.k_by_length
    if not rows:
        return None
    blocks: list[Block] = [Para(DEFINITION)]
    for key in sorted({(r.target, r.dataset, r.temperature, r.method) for r in rows}):
        mine = [r for r in rows if (r.target, r.dataset, r.temperature, r.method) == key]
        blocks.append(Section(f"{key[0]} · {key[1]} · T={key[2]:g} · {key[3]}", [Table(HEADERS, k_length_lines(mine))],
                              level=3))
    return Section("K by batch size and input length", blocks, anchor="k-by-length")
