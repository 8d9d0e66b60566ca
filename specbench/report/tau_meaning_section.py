"""The report's "What τ means" section: tokens per target step beside vLLM's τ, the glossary of
definitions, and the intervals of zero width that rest on fewer than 10 units (formatting only)."""

from __future__ import annotations

from specbench.report.document import Block, Para, Section, Table
from specbench.results import metric_catalog
from specbench.results.fmt import fmt_metric, fmt_pct
from specbench.results.summary import RunSummary


def steps_section(summary: RunSummary) -> Section | None:
    groups = [g for g in summary.groups if g.tokens_per_step is not None or g.draft_rate is not None]
    blocks: list[Block] = []
    if groups:
        rows = []
        for g in sorted(groups, key=lambda g: (g.target, g.dataset, g.temperature, g.method)):
            n = g.n_requests
            rows.append([g.target, g.dataset, g.method, str(g.k) if g.k is not None else "–", f"{g.temperature:g}",
                         str(n), fmt_metric("tau", g.tau, n_default=n),
                         fmt_metric("tokens_per_step", g.tokens_per_step, n_default=n),
                         fmt_metric("tokens_per_step_per_request", g.tokens_per_step_per_request, n_default=n),
                         fmt_pct(g.terminal_overcount, n_default=n), fmt_pct(g.draft_rate, n_default=n),
                         g.steps_note or "every step recorded"])
        blocks += [
            Para("vLLM's τ counts, per drafting step, the accepted drafts plus the bonus token; tokens per step "
                 "divides the tokens a request committed (output − 1) by the target's verification steps, with or "
                 "without a draft, which is what a speedup follows. Terminal overcount: the share of τ's tokens "
                 "accepted past EOS or max_tokens and never emitted. Draft rate: the share of steps that drafted "
                 "(τ describes only those). For a method that always drafts, tokens per step = τ × (1 − terminal "
                 "overcount) exactly; self-drafting reaches τ = K+1 exactly in vLLM's definition, not in tokens "
                 "per step. Time per decoding step divides by verification steps, not drafts."),
            Table(["Target", "Dataset", "Method", "K", "T", "n", "τ (vLLM)", "Tokens per step",
                   "Tokens per step (request mean)", "Terminal overcount", "Draft rate", "Steps"], rows),
        ]
    flags = summary.extra.zero_width
    if flags:
        blocks.append(Para("Flagged, zero-width intervals on fewer than 10 units (not exact by construction: the "
                           "interval claims a certainty these few units cannot give): " + "; ".join(flags) + "."))
    if not blocks and not any(g.tau is not None for g in summary.groups):
        return None
    blocks.append(glossary())
    return Section("What τ means", blocks, anchor="tau-definitions")


def glossary() -> Table:
    """Every definition of tokens per step the report and the suites' references name, and who uses it."""
    return Table(["Definition", "Formula", "Measured here as", "Used by"],
                 [[d.name, d.formula, metric_catalog.label(d.metric), d.used_by]
                  for d in metric_catalog.TAU_DEFINITIONS])
