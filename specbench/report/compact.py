"""The compact Markdown summary of a run: what fits where CI puts it (pure: summary in, text out).

GitHub refuses a PR comment over 65,536 characters and the full report
(:mod:`specbench.report.markdown`) of a suite with K sweeps is longer. This
summary keeps the answer and the alarms only:

* the headline: each method against the reference (EAGLE-3 unless
  ``compare_to`` says otherwise) per target, dataset, temperature and load,
  at its best K: speedup and τ ratios with their intervals, the verdict;
* under a suite's SLOs, each method's goodput over no speculation by load and the load where
  speculation stops raising it;
* a K sweep over batch sizes and input lengths: the best K per cell and what a batch-only schedule loses;
* where steps were timed by phase, the drafter's share of a decoding step and its memory;
* the lossless verdicts: counts per method, and every group that is not
  ``equivalent`` by name;
* the failed counter checks, the cells that did not run;
* the gate's verdict and its failing rules, when a gate result is given;
* where the full report is.

It is always under :data:`COMMENT_LIMIT`: when the lists are longer than its
budget the longest tables are cut (largest first, the headline last) and say
how many rows the full report has beyond them.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from specbench.report.document import Block, Para, Section, Table
from specbench.report.goodput_section import goodput_lines, slo_text
from specbench.report.k_length_section import HEADERS, k_length_lines
from specbench.report.markdown import md_blocks
from specbench.report.quality import equivalence_entries, verdict_label
from specbench.report.terminal import TAU_ONLY, TAU_ONLY_NOTE, headline_looped, headline_verdict, with_k
from specbench.results.degeneracy import MARK_NOTE, mark
from specbench.results.fmt import fmt_est, fmt_pct, fmt_speedup, speed_intervals_note
from specbench.results.manifest import RunManifest
from specbench.results.parts import HeadlineRow
from specbench.results.summary import RunSummary

if TYPE_CHECKING:
    from specbench.regression.gate import GateResult

#: GitHub's limit for a comment (and an issue or PR body), in characters.
COMMENT_LIMIT = 65_536
#: What this summary may take: the limit less room for a wrapper (a comment header, a gate's own text).
BUDGET = 60_000
SUFFIX = ".summary.md"


def _where(r: HeadlineRow) -> str:
    load = f"batch {r.batch_size}" if r.request_rate is None else f"{r.request_rate:g} req/s"
    return f"{r.dataset} · T={r.temperature:g} · {load}"


def _headline(summary: RunSummary) -> Section:
    if not summary.headline:
        return Section("Against the reference", [Para("No method ran against a reference method in this run.")])
    refs = sorted({r.reference for r in summary.headline if r.reference != "baseline"}) or ["baseline"]
    rows = sorted(summary.headline, key=lambda r: (r.target, r.dataset, r.temperature, r.request_rate is not None,
                                                   r.request_rate or r.batch_size, r.method))
    verdicts = Counter(headline_verdict(r) for r in rows)
    tau_only = f"{TAU_ONLY_NOTE}. " if TAU_ONLY in verdicts else ""
    looped = [headline_looped(summary, r) for r in rows]
    loops = f"{MARK_NOTE}. " if any(looped) else ""
    return Section(f"Against {', '.join(refs)}", anchor="headline", blocks=[
        Para("Each method over the reference at one target, dataset, temperature (T) and load, each arm at its "
             "best K; ratios paired by prompt (with speed rounds: decided by `specbench ab`'s rule over the "
             "per-round ratios, its confidence sequence shown; else a 95 % bootstrap interval). "
             + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) + ". " + tau_only + loops
             + speed_intervals_note(summary)),
        Table(["Target", "Dataset · T · load", "Method", "Reference", "n", "Speedup ratio", "τ ratio", "Verdict"],
              [[r.target, _where(r), with_k(r.method, r.method_k), with_k(r.reference, r.reference_k),
                str(r.n_prompts), fmt_speedup(r.speedup_ratio), fmt_est(r.tau_ratio, 2, unit="×"),
                mark(headline_verdict(r), loop)]
               for r, loop in zip(rows, looped, strict=True)]),
    ])


def _goodput(summary: RunSummary) -> Section | None:
    gp = summary.extra.goodput
    if gp is None or not gp.curves:
        return None
    return Section("Goodput under SLOs", [
        Para(f"SLOs {slo_text(gp.slo)}: requests meeting all of them per second of the cells' wall time (vLLM's "
             "request goodput); each method over no speculation at every load, decided by the headline's rule with "
             "speed rounds, else a 95 % bootstrap interval. Stops raising goodput at: the lowest load from which on "
             "no load's verdict is higher."),
        Table(["Target", "Dataset · T", "Method", "Raises goodput up to", "Stops raising it at", "Ratio by load"],
              goodput_lines(gp)),
    ])


def _step_share(summary: RunSummary) -> Section | None:
    rows = [r for r in summary.extra.step_shares if r.k]
    if not rows:
        return None
    return Section("The drafter's share of a step", [
        Para("Per decoding step, timed inside vLLM's model runner (`step-phase-timing`): drafting (the drafter's "
             "proposal) and verification (the target's forward, sampling, bookkeeping), each timed; share = Σ "
             "drafting / Σ step; 95 % bootstrap over the steps (n: steps)."),
        Table(["Target", "Dataset", "T", "Method", "K", "Batch", "Drafting share", "Drafting ms", "Verification ms", "Drafter MiB",
               "KV tokens lost"],
              [[r.target, r.dataset, f"{r.temperature:g}", r.method, str(r.k), str(r.batch_size), fmt_pct(r.draft_share),
                fmt_est(r.draft_ms, 3, n_default=r.steps), fmt_est(r.verification_ms, 3, n_default=r.steps),
                "–" if r.draft_weights_mib is None else f"{r.draft_weights_mib:.2f}",
                "–" if r.kv_tokens_lost is None else f"{r.kv_tokens_lost:.1%}"]
               for r in sorted(rows, key=lambda r: (r.target, r.dataset, r.temperature, r.batch_size, r.method,
                                                     r.k or 0))]),
    ])


def _k_by_length(summary: RunSummary) -> Section | None:
    rows = summary.extra.k_by_length
    if not rows:
        return None
    lines = [[r.target, r.method, *line] for r in rows for line in k_length_lines([r])]
    return Section("K by batch size and input length", [
        Para("Best K per batch size and input length (the headline's paired rule on TPOT; ties take the cheapest K), "
             "the K a batch-size-only schedule gives, and the decode speed at that K over the best K's there."),
        Table(["Target", "Method", *HEADERS], lines)])


def _lossless(summary: RunSummary) -> Section | None:
    counts: dict[tuple[str, str], Counter[str]] = {}
    flagged: list[list[str]] = []
    for g in summary.whole_groups:
        for test, eq in equivalence_entries(g):
            v = verdict_label(g, eq)
            counts.setdefault((g.target, g.method), Counter())[v] += 1
            if v != "equivalent":
                flagged.append([g.group_id, test, v])
    if not counts:
        return None
    verdicts = sorted({v for c in counts.values() for v in c})
    blocks: list[Block] = [
        Para("Lossless checks against the baseline (greedy identity, sampled distribution): groups per verdict."),
        Table(["Target", "Method", *verdicts],
              [[t, m, *(str(c.get(v, 0)) for v in verdicts)] for (t, m), c in counts.items()]),
    ]
    if flagged:
        blocks += [Para(f"{len(flagged)} verdicts other than equivalent:"),
                   Table(["Group", "Test", "Verdict"], flagged)]
    return Section("Lossless", blocks)


def _alarms(summary: RunSummary) -> Section:
    failed = [c for c in summary.checks if not c.ok]
    not_run = [(g.group_id, g.status, (g.reasons or ["–"])[0]) for g in summary.whole_groups if g.status != "ok"]
    blocks: list[Block] = [Para(
        f"Checks: {len(summary.checks) - len(failed)} of {len(summary.checks)} passed"
        + (f"; {len(failed)} FAILED:" if failed else ".")
    )]
    if failed:
        blocks.append(Table(["Group", "Check"], [[c.group_id, c.check] for c in failed]))
    if not_run:
        blocks += [Para(f"{len(not_run)} groups did not fully run:"),
                   Table(["Group", "Status", "Reason"], [[g, s, r[:160]] for g, s, r in not_run])]
    return Section("Checks and failures", blocks)


def _gate(gate: GateResult) -> Section:
    head = {"pass": "PASS", "regression": "FAIL"}.get(gate.status, "ERROR")
    blocks: list[Block] = [Para(f"**{head}** (exit {gate.exit_code}, {gate.status}) against {gate.baseline}: "
                                f"{len(gate.checks) - len(gate.failures)} of {len(gate.checks)} rules passed.")]
    blocks += [Para(f"ERROR: {e}") for e in gate.errors]
    if gate.failures:
        blocks.append(Table(["Group", "Metric", "Rule", "Why"],
                            [[c.group_id, c.metric, c.rule, c.message] for c in gate.failures]))
    blocks += [Para(f"Speed: {n}") for n in gate.notes]
    return Section("Gate", blocks)


def build_compact(summary: RunSummary, manifest: RunManifest | None = None, *, full_report: str | None = None,
                  gate: GateResult | None = None) -> list[Block]:
    """The compact summary's blocks, every table whole (:func:`render_compact` cuts them to the budget)."""
    ok = sum(1 for g in summary.whole_groups if g.status == "ok")
    where = f"the full report: `{full_report}`" if full_report else "the full report: `specbench report RUN_DIR`"
    created = manifest.created_at if manifest is not None else None
    blocks: list[Block] = [Para(f"Run `{summary.run_id}` ({created or 'date unknown'}): "
                                f"{ok} of {len(summary.whole_groups)} groups ran. Every table and figure is in {where} "
                                "(Markdown and HTML).")]
    if gate is not None:
        blocks.append(_gate(gate))
    blocks.append(_headline(summary))
    goodput = _goodput(summary)
    blocks += [goodput] if goodput is not None else []
    shares = _step_share(summary)
    blocks += [shares] if shares is not None else []
    by_length = _k_by_length(summary)
    blocks += [by_length] if by_length is not None else []
    lossless = _lossless(summary)
    blocks += [lossless] if lossless is not None else []
    blocks.append(_alarms(summary))
    return blocks


def _tables(blocks: list[Block]) -> list[Table]:
    out: list[Table] = []
    for b in blocks:
        if isinstance(b, Section):
            out += _tables(b.blocks)
        elif isinstance(b, Table):
            out.append(b)
    return out


def _text(summary: RunSummary, blocks: list[Block]) -> str:
    lines = [f"# specbench · {summary.suite_name} (summary)", "", *md_blocks(blocks)]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def render_compact(summary: RunSummary, manifest: RunManifest | None = None, *, full_report: str | None = None,
                   gate: GateResult | None = None, budget: int = BUDGET) -> str:
    """The compact summary as Markdown, at most ``budget`` characters (deterministic)."""
    blocks = build_compact(summary, manifest, full_report=full_report, gate=gate)
    text = _text(summary, blocks)
    tables = _tables(blocks)
    whole = {id(t): len(t.rows) for t in tables}
    headline = {id(t) for b in blocks if isinstance(b, Section) and b.anchor == "headline" for t in _tables([b])}
    while len(text) > budget:  # the lists of alarms are cut before the headline
        longest = max(tables, key=lambda t: (len(t.rows) > 1 and id(t) not in headline, len(t.rows)))
        if len(longest.rows) <= 1:
            raise ValueError(f"the summary's fixed text alone is over {budget} characters")
        longest.rows = longest.rows[: len(longest.rows) // 2]
        longest.notes = [f"… {whole[id(longest)] - len(longest.rows)} more rows in the full report."]
        text = _text(summary, blocks)
    return text
