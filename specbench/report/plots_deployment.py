"""Figures of what a deployer asks (issue 52): each method's goodput over no speculation by load, and the draft
acceptance rate along the output (draws stored numbers; computes none)."""

from __future__ import annotations

from collections import defaultdict

from specbench.report.figure import BORDER, INK, TITLES, est_values, est_yerr, new_figure, to_png
from specbench.results.summary import RunSummary


def goodput_vs_load_figure(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    """One panel per (target, dataset, temperature, load axis): each method's goodput ratio to no speculation
    (95 % interval; with rounds the confidence sequence) by load, a dashed line at 1."""
    gp = summary.extra.goodput
    panels: dict[tuple, list] = defaultdict(list)
    for c in gp.curves if gp is not None else []:
        if any(p.ratio.value is not None for p in c.points):
            panels[(c.target, c.dataset, c.temperature, c.axis)].append(c)
    if gp is None or not panels:
        return None
    slo = ", ".join(f"{k} ≤ {v:g} ms" for k, v in gp.slo.given().items())
    fig, axes = new_figure(len(panels))
    for ax, ((target, dataset, temp, axis), curves) in zip(axes, sorted(panels.items(), key=lambda kv: str(kv[0])),
                                                           strict=True):
        for c in sorted(curves, key=lambda c: c.method):
            pts = [p for p in c.points if p.ratio.value is not None]
            ax.errorbar([p.load for p in pts], est_values([p.ratio for p in pts]), yerr=est_yerr([p.ratio for p in pts]),
                        capsize=3, marker="o", color=colors.get(c.method, "#888888"), label=c.method)
        ax.axhline(1.0, color=BORDER, linestyle="--", linewidth=1)
        loads = sorted({p.load for c in curves for p in c.points})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(loads, [f"{v:g}" for v in loads])
        ax.set_xlabel("request rate (req/s)" if axis == "request_rate" else "concurrency / batch size")
        ax.set_ylabel("goodput × no speculation's")
        ax.set_title(f"{target} · {dataset} · T={temp:g}\n{slo}", fontsize=10, color=INK)
        ax.legend(fontsize=8, frameon=False)
    return to_png(fig, TITLES["goodput_vs_load"] + " (95% intervals)")


def acceptance_along_output_figure(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    """One panel per (target, dataset): each group's acceptance rate by bucket of output positions (95 %
    intervals), a dotted line where the first request passes the zoo's training length."""
    panels: dict[tuple[str, str], list] = defaultdict(list)
    for a in summary.extra.acceptance_along_output:
        if a.buckets:
            panels[(a.target, a.dataset)].append(a)
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    for ax, ((target, dataset), rows) in zip(axes, sorted(panels.items()), strict=True):
        loads = {(a.batch_size, a.request_rate) for a in rows}
        temps = {a.temperature for a in rows}
        for a in sorted(rows, key=lambda a: (a.method, a.temperature, a.request_rate or a.batch_size)):
            label = a.method + (f" T={a.temperature:g}" if len(temps) > 1 else "")
            label += (f" · {a.request_rate:g} req/s" if a.request_rate is not None else f" · load {a.batch_size}"
                      ) if len(loads) > 1 else ""
            rates = [b.rate for b in a.buckets]
            ax.errorbar([b.start for b in a.buckets], est_values(rates), yerr=est_yerr(rates), capsize=3, marker="o",
                        color=colors.get(a.method, "#888888"), label=label)
        past = [a.past_training_from for a in rows if a.past_training_from is not None]
        if past:
            ax.axvline(min(past), color=INK, linestyle=":", linewidth=1, label="past the zoo's training length")
        ax.set_xlabel(f"output position (bucket start, {rows[0].bucket_tokens} tokens each)")
        ax.set_ylabel("acceptance rate (accepted / drafted)")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{target} · {dataset}", fontsize=10, color=INK)
        ax.legend(fontsize=8, frameon=False)
    return to_png(fig, TITLES["acceptance_along_output"] + " (95% intervals over requests)")


def step_share_figure(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    """One panel per (target, batch size): per method and K a stacked bar of a decoding step's timed phases
    (verification, drafting, untimed) with the engine's step as the requests saw it (a marker; 95 % intervals)."""
    panels: dict[tuple[str, str, int], list] = defaultdict(list)
    for r in summary.extra.step_shares:
        panels[(r.target, r.dataset, r.batch_size)].append(r)
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    for ax, ((target, dataset, batch), rows) in zip(axes, sorted(panels.items()), strict=True):
        rows = sorted(rows, key=lambda r: (r.method, r.k or 0, r.temperature))
        x = list(range(len(rows)))
        ver = [r.verification_ms for r in rows]
        dra = [r.draft_ms for r in rows]
        bottom = est_values(ver)
        ax.bar(x, bottom, yerr=est_yerr(ver), capsize=3, color=BORDER, edgecolor=INK, linewidth=0.4,
               label="verification (forward, sampling, bookkeeping)")
        ax.bar(x, est_values(dra), bottom=bottom, yerr=est_yerr(dra), capsize=3,
               color=[colors.get(r.method, "#888888") for r in rows], edgecolor=INK, linewidth=0.4, label="drafting")
        top = [b + d for b, d in zip(bottom, est_values(dra), strict=True)]
        ax.bar(x, est_values([r.untimed_ms for r in rows]), bottom=top, color="white", edgecolor=INK, linewidth=0.4,
               hatch="//", label="untimed")
        eng = [r.engine_step_ms for r in rows]
        if any(e is not None for e in eng):
            ax.errorbar(x, est_values(eng), yerr=est_yerr(eng), fmt="D", color=INK, capsize=3,
                        label="engine step (as requests saw it)")
        temps = {r.temperature for r in rows}
        ax.set_xticks(x, [f"{r.method}" + (f" K={r.k}" if r.k else "") + (f" T={r.temperature:g}" if len(temps) > 1
                                                                           else "") for r in rows],
                      rotation=20, ha="right")
        ax.set_ylabel("ms per decoding step")
        ax.set_title(f"{target} · {dataset} · batch {batch}", fontsize=10, color=INK)
        ax.legend(fontsize=8, frameon=False)
    return to_png(fig, TITLES["step_share"] + " (95% intervals over steps)")
