"""Figures of the method-vs-method comparison: the headline at a glance and step time vs K."""

from __future__ import annotations

import math
from collections import defaultdict

from specbench.report.figure import BORDER, INK, TITLES, est_values, est_yerr, new_figure, to_png
from specbench.results.summary import RunSummary


def headline_figure(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    """One panel per (target, dataset, temperature): each method's speedup ratio over the reference
    (95% interval) by load, a dashed line at 1."""
    panels: dict[tuple, list] = defaultdict(list)
    for r in summary.headline:
        if r.speedup_ratio.value is not None:
            panels[(r.target, r.dataset, r.temperature)].append(r)
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    for ax, ((target, dataset, temp), rows) in zip(axes, sorted(panels.items(), key=lambda kv: kv[0]), strict=True):
        loads = sorted({(r.request_rate is not None, r.request_rate or r.batch_size) for r in rows})
        methods = sorted({r.method for r in rows})
        width = 0.8 / max(1, len(methods))
        # The axis shows the ratios, not the intervals the rounds could not bound (one would flatten every bar):
        # an interval past the top is drawn to it with an arrow.
        top = max([2.0, *(1.4 * (r.speedup_ratio.value or 0.0) for r in rows)])
        for i, m in enumerate(methods):
            mine = {(r.request_rate is not None, r.request_rate or r.batch_size): r for r in rows if r.method == m}
            xs = [j + (i - (len(methods) - 1) / 2) * width for j, ld in enumerate(loads) if ld in mine]
            ests = [mine[ld].speedup_ratio for ld in loads if ld in mine]
            shown = [e.model_copy(update={"ci_high": top}) if e.ci_high is not None and e.ci_high > top else e
                     for e in ests]
            ax.bar(xs, est_values(shown), width=width, yerr=est_yerr(shown), capsize=3,
                   color=colors.get(m, "#888888"), edgecolor=INK, linewidth=0.4, label=m)
            for x, e in zip(xs, ests, strict=True):
                if e.ci_high is not None and e.ci_high > top:
                    ax.annotate("", xy=(x, top), xytext=(x, top * 0.9),
                                arrowprops={"arrowstyle": "->", "color": INK, "linewidth": 0.8})
        ax.set_ylim(0, top * 1.02)
        ax.axhline(1.0, color=BORDER, linestyle="--", linewidth=1)
        ax.set_xticks(range(len(loads)), [f"{v:g} req/s" if rate else f"{v:g}" for rate, v in loads])
        ax.set_xlabel("load (batch size / concurrency)")
        decode = any(r.rounds is not None for r in rows)  # decided on rounds: the decode speed ratio (1 / TPOT)
        ax.set_ylabel(f"× {rows[0].reference} " + ("decode tok/s" if decode else "tok/s"))
        ax.set_title(f"{target} · {dataset} · T={temp:g}", fontsize=10, color=INK)
        ax.legend(fontsize=8, frameon=False)
    return to_png(fig, TITLES["headline"] + " (each method at its best K; intervals: the rule's confidence sequence "
                  "in a run with speed rounds, else 95 %; an arrow: the interval runs past the axis, unbounded by "
                  "the rounds)")


def step_time_vs_k(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    """One panel per (target, dataset, temperature, load): step time (ms) against K per swept method."""
    panels: dict[tuple, list] = defaultdict(list)
    for s in summary.k_sweeps:
        if any(p.step_time_s is not None for p in s.points):
            panels[(s.target, s.dataset, s.temperature, s.request_rate, s.batch_size)].append(s)
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    for ax, ((target, dataset, temp, rate, bs), sweeps) in zip(axes, sorted(panels.items(), key=lambda kv: str(kv[0])),
                                                                strict=True):
        for s in sorted(sweeps, key=lambda s: s.method):
            pts = [p for p in s.points if p.step_time_s is not None]
            ests = [p.step_time_s.model_copy(update={k: (v * 1000 if v is not None else None) for k, v in
                                                     (("value", p.step_time_s.value), ("ci_low", p.step_time_s.ci_low),
                                                      ("ci_high", p.step_time_s.ci_high))})
                    for p in pts if p.step_time_s is not None]
            ax.errorbar([p.k for p in pts], est_values(ests), yerr=est_yerr(ests), capsize=3, marker="o",
                        color=colors.get(s.method, "#888888"), label=s.method)
        ax.set_xlabel("K (speculative tokens)")
        ax.set_ylabel("ms per decoding step")
        load = f"{rate:g} req/s" if rate is not None else f"load {bs}"
        ax.set_title(f"{target} · {dataset} · T={temp:g} · {load}", fontsize=10, color=INK)
        ax.legend(fontsize=8, frameon=False)
    return to_png(fig, TITLES["step_time_vs_k"] + " (95% intervals over requests)")


def category_heatmap(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    """One panel per (target, dataset, T, load) of the category matrix: τ of each method·K (rows) on
    each category (columns) as colour, the value written in the cell; too few prompts: the value in
    brackets."""
    from specbench.report.workloads import matrix_tables, row_label

    tables = matrix_tables(summary)
    if not tables:
        return None
    fig, axes = new_figure(len(tables), cols=1, panel=(8.0, 3.6))
    for ax, cells in zip(axes, tables.values(), strict=True):
        c0 = cells[0]
        cats = sorted({c.category for c in cells})
        labels = sorted({row_label(c) for c in cells})
        grid = [[math.nan] * len(cats) for _ in labels]
        for c in cells:
            if c.tau is not None and c.tau.value is not None:
                grid[labels.index(row_label(c))][cats.index(c.category)] = c.tau.value
        im = ax.imshow(grid, aspect="auto", cmap="viridis")
        ax.grid(False)
        ax.set_xticks(range(len(cats)), cats, rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        for c in cells:
            if c.tau is not None and c.tau.value is not None:
                text = f"{c.tau.value:.2f}"
                ax.text(cats.index(c.category), labels.index(row_label(c)), f"({text})" if c.too_few else text,
                        ha="center", va="center", fontsize=7, color="white")
        fig.colorbar(im, ax=ax, label="τ")
        ax.set_title(f"{c0.target} · {c0.dataset} · T={c0.temperature:g} · load {c0.request_rate or c0.batch_size}",
                     color=INK, fontsize=10)
    return to_png(fig, TITLES["category_heatmap"])
