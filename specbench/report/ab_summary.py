"""An A/B run's summary as Markdown, short enough for a pull-request comment (issue 36)."""

from __future__ import annotations

from specbench.analysis.ab_rounds import ABResult
from specbench.regression.ab_gate import ABGateOutcome
from specbench.report.document import Para, Section, Table
from specbench.results import metric_catalog as catalog

_MARK = {"same": "same", "different": "**different**", "improved": "improved", "undecided": "undecided"}


def _rule_text(result: ABResult) -> str:
    """How the verdicts were reached: the rule, its unit (a round, or an engine instance's block of rounds) and
    how many units ran."""
    r = result.rule
    if result.instances > 1:
        unit = (f"B/A per engine instance (the mean log ratio of its rounds: each arm's engines started afresh "
                f"{result.instances} times, an instance's own offset is spread between units)")
        ran = (f"no verdict before {r.min_rounds} instances; {result.rounds_run} round(s) run on "
               f"{result.instances} instances (cap {r.max_rounds} instances)")
    else:
        unit = "B/A per round"
        ran = f"no verdict before round {r.min_rounds}; {result.rounds_run} round(s) run (cap {r.max_rounds})"
    return (f"{unit}, a confidence sequence (α = {r.alpha:g}) looked at after every unit; *same* inside "
            f"±{r.margin:.0%}, *different* beyond it on the regression side; {ran}")


def _units_header(result: ABResult) -> str:
    return "instances" if result.instances > 1 else "rounds"


def render_ab_markdown(result: ABResult, outcome: ABGateOutcome, title: str) -> str:
    status = {0: "PASS", 1: "FAIL", 3: "NOTHING MEASURED"}.get(outcome.exit_code, str(outcome.exit_code))
    out = [f"## specbench ab · {title}: {status}", ""]
    for arm, desc in sorted(result.arms.items()):
        out.append(f"- **{arm.upper()}**: {desc}")
    out += [
        f"- Rule: {_rule_text(result)}"
        + (f", budget {result.budget_s:.0f} s" + (" (spent)" if result.budget_ended else "") if result.budget_s else ""),
        "",
    ]
    for line in outcome.failures:
        out.append(f"- FAIL {line}")
    for line in outcome.notes:
        out.append(f"- {line}")
    if outcome.failures or outcome.notes:
        out.append("")
    out += [f"| group | metric | B/A [interval] | verdict | {_units_header(result)} |", "|---|---|---|---|---|"]
    for where, v in result.verdicts():
        label = where if where.count("/") >= 2 else f"{where} (pooled, {v.groups} groups)"
        out.append(f"| {label} | {catalog.label(v.metric)} | {v.ratio.fmt(3)} | {_MARK[v.verdict]} | {v.rounds} |")
    if result.exact:
        out += ["", "Deterministic comparisons (τ = 1 + accepted / drafts over the group's cells, vLLM's definition; "
                "identity: requests whose output tokens are equal in both arms):", "",
                "| group | τ A | τ B | identical outputs |", "|---|---|---|---|"]
        for g in result.exact:
            ta = "–" if g.tau_a is None else f"{g.tau_a:.4f}"
            tb = "–" if g.tau_b is None else f"{g.tau_b:.4f}"
            out.append(f"| {g.group} | {ta} | {tb} | {g.identical} / {g.compared} |")
    return "\n".join(out) + "\n"


def ab_section(result: ABResult) -> Section:
    """The A/B section of a run's full report (Markdown and HTML): the verdicts and the exact comparisons."""
    rows = []
    for where, v in result.verdicts():
        label = where if where.count("/") >= 2 else f"{where} (pooled, {v.groups} groups)"
        spread = "–" if v.spread is None else f"{v.spread:.3f}"
        rows.append([label, catalog.label(v.metric), v.ratio.fmt(3), v.verdict, str(v.rounds), spread])
    blocks: list = [
        Para(" · ".join(f"{arm.upper()}: {desc}" for arm, desc in sorted(result.arms.items()))),
        Para(f"{_rule_text(result)}; a round's B/A: the metric over the round's requests of each arm "
             "(docs/ab-decision.md)."),
        Table(["group", "metric", "B/A [interval]", "verdict", _units_header(result), "spread (sd of log B/A)"], rows),
    ]
    if result.exact:
        blocks.append(Table(["group", "τ A", "τ B", "identical outputs"],
                            [[g.group, "–" if g.tau_a is None else f"{g.tau_a:.4f}",
                              "–" if g.tau_b is None else f"{g.tau_b:.4f}", f"{g.identical} / {g.compared}"]
                             for g in result.exact],
                            notes=["τ = 1 + accepted / drafts over the group's cells (vLLM's definition); identical: "
                                   "requests whose output tokens are equal in both arms"]))
    return Section("A/B", blocks, anchor="ab")


def ab_figure(result: ABResult) -> bytes | None:
    """B/A per group and pooled method with its interval, one panel per gated metric, the margin shaded."""
    metrics = [m for m in result.metrics if any(v.metric == m and v.ratio.value is not None for _, v in result.verdicts())]
    if not metrics:
        return None
    from specbench.report.figure import INK, KNOWN_COLORS, est_yerr, new_figure, to_png

    fig, axes = new_figure(len(metrics), cols=1, panel=(8.0, 1.0 + 0.3 * len(result.verdicts()) / len(metrics)))
    colors = {"different": KNOWN_COLORS["dspark"], "improved": KNOWN_COLORS["dflash"], "same": KNOWN_COLORS["eagle3"],
              "undecided": KNOWN_COLORS["baseline"]}
    for ax, m in zip(axes, metrics, strict=True):
        items = [(w, v) for w, v in result.verdicts() if v.metric == m and v.ratio.value is not None]
        ests = [v.ratio.model_copy(update={"ci_low": max(v.ratio.ci_low or 0, 0.5), "ci_high": min(v.ratio.ci_high or 2, 2.0)})
                for _, v in items]
        ys = list(range(len(items)))[::-1]
        lo, hi = 1 / (1 + result.rule.margin), 1 + result.rule.margin
        ax.axvspan(lo, hi, color="#e8f0fe", zorder=0)
        ax.axvline(1.0, color=INK, linewidth=0.8)
        for y, (_w, v), e, err_lo, err_hi in zip(ys, items, ests, *est_yerr(ests), strict=True):
            ax.errorbar([e.value], [y], xerr=[[err_lo], [err_hi]], fmt="o", color=colors[v.verdict], capsize=3)
        ax.set_yticks(ys, [w if w.count("/") >= 2 else f"{w} (pooled)" for w, _ in items], fontsize=8)
        ax.set_xlim(0.5, 2.0)
        ax.set_xlabel(f"{catalog.label(m)}: B/A (shaded: ±{result.rule.margin:.0%}; clipped to [0.5, 2])")
    return to_png(fig, "A/B: B/A per group (grey undecided, blue same, red different, green improved)")
