"""The report's "Acceptance along the output" section: per speculative group, the draft acceptance rate by bucket
of output positions, from the step traces (renders; the numbers are
:mod:`specbench.analysis.acceptance_along_output`'s)."""

from __future__ import annotations

from specbench.report.document import Block, Para, Section, Table
from specbench.results.fmt import fmt_est
from specbench.results.output_acceptance import OutputAcceptance, OutputBucket
from specbench.results.summary import RunSummary

DEFINITION = (
    "Each verification step's first drafted token has an output position, found by walking the request's step "
    "trace (the prefill emits position 0; step i emits accepted + 1 tokens, so it drafts from 1 + Σ earlier "
    "(accepted + 1) on). A bucket's rate = Σ accepted / Σ drafted over the group's drafting steps whose first "
    "drafted token lies in it, pooled; 95 % bootstrap over requests (Wilson over the draft tokens when every "
    "request accepted all or none of them); n: requests, steps beside it. The last step may draft past the "
    "output's end (counted as vLLM counts it). Only traces that list every step are walked; a request whose "
    "trace lists only its drafting steps (ngram or suffix without a replay) is left out, as the table says.")
MARK = "†"


def _where(a: OutputAcceptance) -> str:
    load = f"{a.request_rate:g} req/s" if a.request_rate is not None else str(a.batch_size)
    return f"T={a.temperature:g} · load {load}"


def _cell(b: OutputBucket, past: int | None) -> str:
    mark = MARK if past is not None and b.end > past else ""
    return f"{fmt_est(b.rate, 2)}{mark} ({b.requests} req, {b.steps} steps)"


def _table(rows: list[OutputAcceptance]) -> Table:
    starts = sorted({b.start for a in rows for b in a.buckets})
    ends = {b.start: b.end for a in rows for b in a.buckets}
    body, notes = [], []
    for a in rows:
        by_start = {b.start: b for b in a.buckets}
        left_out = f" ({a.incomplete} left out)" if a.incomplete else ""
        body.append([a.method, str(a.k) if a.k is not None else "–", _where(a), f"{a.requests}{left_out}"]
                    + [_cell(by_start[s], a.past_training_from) if s in by_start else "–" for s in starts])
        if a.incomplete:
            notes.append(f"{a.method} ({_where(a)}): {a.incomplete} requests left out, their traces list only the "
                         "drafting steps (where a step falls in the output is unknown).")
    trained = sorted({(a.trained_tokens, a.past_training_from, a.past_training_all) for a in rows
                      if a.trained_tokens is not None and a.past_training_from is not None})
    for tokens, first, every in trained:
        notes.append(f"{MARK} The CPU zoo's target and drafters were trained on {tokens}-token sequences (the "
                     f"drafters on short prompts continued by the target's own output): from output position "
                     f"{first} on some request's prompt and output together pass {tokens} tokens, from {every} on "
                     "every request's. Acceptance there shows the zoo's training length, not a drafter's drift on "
                     "long outputs; a run that shows that needs drafters trained on long sequences (a GPU run).")
    return Table(["Method", "K", "Where", "Requests"] + [f"{s}–{ends[s] - 1}" for s in starts], body,
                 list(dict.fromkeys(notes)))


def output_acceptance_section(summary: RunSummary) -> Section | None:
    """The section, or None for a run without step traces."""
    rows = summary.extra.acceptance_along_output
    if not rows:
        return None
    by_where: dict[tuple[str, str], list[OutputAcceptance]] = {}
    for a in rows:
        by_where.setdefault((a.target, a.dataset), []).append(a)
    blocks: list[Block] = [Para(f"Draft acceptance by output position, in buckets of {rows[0].bucket_tokens} "
                                f"tokens. {DEFINITION}")]
    for (target, dataset), group_rows in by_where.items():
        group_rows.sort(key=lambda a: (a.temperature, a.request_rate is not None, a.request_rate or a.batch_size,
                                       a.method))
        blocks.append(Section(f"{target} · {dataset}", [_table(group_rows)], level=3))
    return Section("Acceptance along the output", blocks, anchor="acceptance-along-output")
