"""Figures of a run (matplotlib's Agg canvas, no pyplot state), as PNG bytes.

:func:`make_figures` returns only the figures the summary has data for:

* ``tau`` — τ by method × dataset with 95% interval bars and published τ;
* ``per_position`` — per-position acceptance curves per method;
* ``speedup_vs_load`` / ``latency_vs_throughput`` — when groups sweep load
  (batch size or concurrency; Poisson request rates get panels of their own);
* ``serving_speedup`` — from the speedup rows of ``summary.extra.serving`` (by
  ``concurrency`` or ``request_rate``);
* ``accuracy_speedup`` — task accuracy beside speedup;
* ``goodput_vs_load`` / ``acceptance_along_output`` — goodput over no speculation by load under a suite's
  SLOs, and draft acceptance along the output (:mod:`specbench.report.plots_deployment`).

Every method keeps one colour in every figure (:func:`method_colors`); the
figures have an opaque light face and a border so they read on light and dark
pages alike.
"""

from __future__ import annotations

from collections.abc import Iterable

from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator, NullLocator

from specbench.report import plots_deployment, plots_methods
from specbench.report.figure import (
    BORDER,
    FACE,
    GRID,
    INK,
    LINESTYLES,
    MARKERS,
    PALETTE,
    TITLES,
    est_values,
    est_yerr,
    method_colors,
    new_figure,
    to_png,
)
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate

# --------------------------------------------------------------------------
# helpers


def _ok(g: GroupSummary) -> bool:
    return g.status in ("ok", "partial")


def _panels(summary: RunSummary, pred) -> dict[tuple[str, str], list[GroupSummary]]:
    out: dict[tuple[str, str], list[GroupSummary]] = {}
    for g in summary.whole_groups:
        if _ok(g) and pred(g):
            out.setdefault((g.target, g.dataset), []).append(g)
    return out


def _lowest_load(groups: list[GroupSummary]) -> list[GroupSummary]:
    """One group per (method, dataset, temperature): the one at the smallest load."""
    best: dict[tuple[str, str, float], GroupSummary] = {}
    for g in groups:
        key = (g.method, g.dataset, g.temperature)
        if key not in best or _load_order(g) < _load_order(best[key]):
            best[key] = g
    return list(best.values())


def _legend(ax: Axes) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8, frameon=True, facecolor=FACE, edgecolor=GRID)


# --------------------------------------------------------------------------
# figures


def _tau(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    targets: dict[str, list[GroupSummary]] = {}
    for g in summary.whole_groups:
        if _ok(g) and g.tau is not None and g.tau.value is not None:
            targets.setdefault(g.target, []).append(g)
    if not targets:
        return None
    multi_t = len({g.temperature for g in summary.whole_groups}) > 1
    fig, axes = new_figure(len(targets), cols=1, panel=(9.0, 3.6))
    for ax, (target, groups) in zip(axes, targets.items(), strict=True):
        groups = _lowest_load(groups)
        ref_labelled = False
        cats = list(dict.fromkeys((g.dataset, g.temperature) for g in groups))
        methods = list(dict.fromkeys(g.method for g in groups))
        width = 0.8 / len(methods)
        for mi, m in enumerate(methods):
            xs: list[float] = []
            ests: list[Estimate | None] = []
            refs: list[tuple[float, float]] = []
            for ci, cat in enumerate(cats):
                hit = next((g for g in groups if g.method == m and (g.dataset, g.temperature) == cat), None)
                if hit is None:
                    continue
                x = ci - 0.4 + width * (mi + 0.5)
                xs.append(x)
                ests.append(hit.tau)
                ref = (hit.reference or {}).get("tau")
                if ref is not None:
                    refs.append((x, float(ref.value)))
            ax.bar(xs, est_values(ests), width * 0.92, yerr=est_yerr(ests), capsize=3,
                   color=colors[m], edgecolor=INK, linewidth=0.4, label=m, error_kw={"ecolor": INK, "lw": 1})
            if refs:
                ax.scatter([r[0] for r in refs], [r[1] for r in refs], marker="D", s=28, color=INK, zorder=5,
                           label=None if ref_labelled else "published τ")
                ref_labelled = True
        ax.axhline(1.0, color=BORDER, linestyle="--", linewidth=1)
        ax.grid(False, axis="x")
        ax.set_xticks(range(len(cats)), [f"{d}\nT={t:g}" if multi_t else d for d, t in cats])
        ax.set_ylabel("τ (tokens per target step)")
        ax.set_xlabel("dataset")
        ax.set_ylim(bottom=0)
        ax.set_title(target, fontsize=10, color=INK)
        _legend(ax)
    return to_png(fig, TITLES["tau"] + " (95% intervals, smallest load)")


def _per_position(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    panels = _panels(summary, lambda g: any(p.value is not None for p in g.per_position))
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    for ax, ((target, dataset), groups) in zip(axes, panels.items(), strict=True):
        temps = sorted({g.temperature for g in groups})
        for g in sorted(_lowest_load(groups), key=lambda g: g.temperature):
            xs = [i + 1 for i, p in enumerate(g.per_position) if p.value is not None]
            ests = [p for p in g.per_position if p.value is not None]
            ti = temps.index(g.temperature)
            ax.errorbar(xs, est_values(ests), yerr=est_yerr(ests), capsize=3, color=colors[g.method],
                        marker=MARKERS[ti % len(MARKERS)], linestyle=LINESTYLES[ti % len(LINESTYLES)],
                        label=g.method if len(temps) == 1 else f"{g.method} T={g.temperature:g}")
        ax.set_xlabel("draft position")
        ax.set_ylabel("acceptance rate (accepted / drafts)")
        ax.set_ylim(0, 1.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{target} · {dataset}", fontsize=10, color=INK)
        _legend(ax)
    return to_png(fig, TITLES["per_position"] + " (95% intervals)")


#: x-axis label per kind of load: closed loop (batch size / concurrency) or a Poisson request rate.
LOAD_AXIS = {"load": "load (batch size / concurrency)", "rate": "request rate (req/s)"}


def _load_kind(g: GroupSummary) -> str:
    return "load" if g.request_rate is None else "rate"


def _load_x(g: GroupSummary) -> float:
    return float(g.batch_size) if g.request_rate is None else g.request_rate


def _load_order(g: GroupSummary) -> tuple[int, float]:
    return (0, float(g.batch_size)) if g.request_rate is None else (1, g.request_rate)


def _load_text(g: GroupSummary) -> str:
    return str(g.batch_size) if g.request_rate is None else f"{g.request_rate:g}/s"


def _sweeps(summary: RunSummary) -> dict[tuple[str, str, str], list[GroupSummary]]:
    """Panels ``(target, dataset, kind of load)`` whose groups sweep more than one load of that kind."""
    out: dict[tuple[str, str, str], list[GroupSummary]] = {}
    for (target, dataset), gs in _panels(summary, lambda g: True).items():
        for g in gs:
            out.setdefault((target, dataset, _load_kind(g)), []).append(g)
    return {k: v for k, v in out.items() if len({_load_x(g) for g in v}) > 1}


def _panel_title(target: str, dataset: str, kind: str, kinds: set[str]) -> str:
    return f"{target} · {dataset}" + (" · Poisson arrivals" if kind == "rate" and len(kinds) > 1 else "")


def _series(groups: list[GroupSummary]) -> dict[tuple[str, float], list[GroupSummary]]:
    out: dict[tuple[str, float], list[GroupSummary]] = {}
    for g in sorted(groups, key=_load_x):
        out.setdefault((g.method, g.temperature), []).append(g)
    return out


def _speedup_vs_load(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    panels = {k: v for k, v in _sweeps(summary).items() if any(g.speedup and g.speedup.value for g in v)}
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    kinds = {k[2] for k in panels}
    for ax, ((target, dataset, kind), groups) in zip(axes, panels.items(), strict=True):
        for (m, _t), series in _series(groups).items():
            gs = [g for g in series if g.speedup is not None and g.speedup.value is not None]
            if gs:
                ests = [g.speedup for g in gs]
                ax.errorbar([_load_x(g) for g in gs], est_values(ests), yerr=est_yerr(ests), marker="o",
                            capsize=3, color=colors[m], label=m)
        _load_axes(ax, LOAD_AXIS[kind], [_load_x(g) for g in groups])
        ax.set_title(_panel_title(target, dataset, kind, kinds), fontsize=10, color=INK)
    return to_png(fig, TITLES["speedup_vs_load"] + " (95% intervals)")


def _load_axes(ax: Axes, xlabel: str, loads: Iterable[float]) -> None:
    ax.axhline(1.0, color=BORDER, linestyle="--", linewidth=1, label="baseline")
    ax.set_xscale("log", base=2)
    ticks = sorted(set(loads))
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(xlabel)
    ax.set_ylabel("speedup (× baseline output tok/s)")
    _legend(ax)


def _latency_vs_throughput(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    def point(g: GroupSummary) -> tuple[float, float] | None:
        tput = g.throughput_tps or g.output_tps
        lat = g.latency_p50_s if g.latency_p50_s is not None else (g.latency_s.value if g.latency_s else None)
        return (tput.value, lat) if tput is not None and tput.value is not None and lat is not None else None

    panels = {k: v for k, v in _sweeps(summary).items() if sum(point(g) is not None for g in v) > 1}
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    kinds = {k[2] for k in panels}
    for ax, ((target, dataset, kind), groups) in zip(axes, panels.items(), strict=True):
        for (m, _t), gs in _series(groups).items():
            pts = [(xy, _load_text(g)) for g in gs if (xy := point(g)) is not None]
            if not pts:
                continue
            ax.plot([p[0][0] for p in pts], [p[0][1] for p in pts], marker="o", color=colors[m], label=m)
            for (x, y), load in pts:
                ax.annotate(load, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=INK)
        ax.set_xlabel("throughput (output tok/s)")
        ax.set_ylabel("median request latency (s)")
        labels = "labels: request rate, req/s" if kind == "rate" else "labels: load"
        ax.set_title(f"{_panel_title(target, dataset, kind, kinds)} ({labels})", fontsize=10, color=INK)
        _legend(ax)
    return to_png(fig, TITLES["latency_vs_throughput"])


def _serving_speedup(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    panels: dict[tuple[str, str], dict[tuple[str, str], list[tuple[float, Estimate]]]] = {}
    for r in summary.extra.serving_speedups:
        est = r.estimate
        if est.value is None:
            continue
        if r.request_rate is not None:
            kind, x = "rate", float(r.request_rate)
        elif r.concurrency is not None:
            kind, x = "concurrency", float(r.concurrency)
        else:
            continue
        where = " · ".join(v for v in (r.target, r.dataset) if v)
        panels.setdefault((where, kind), {}).setdefault((r.method, r.metric), []).append((x, est))
    if not panels:
        return None
    fig, axes = new_figure(len(panels))
    for ax, ((where, kind), lines) in zip(axes, panels.items(), strict=True):
        for (m, metric), pts in lines.items():
            pts.sort(key=lambda p: p[0])
            ests = [p[1] for p in pts]
            ax.errorbar([p[0] for p in pts], est_values(ests), yerr=est_yerr(ests), marker="o", capsize=3,
                        color=colors.get(m, PALETTE[0]), linestyle="--" if metric == "tpot" else "-",
                        label=f"{m} ({metric})" if metric else m)
        _load_axes(ax, "request rate (req/s)" if kind == "rate" else "concurrent requests",
                   [p[0] for pts in lines.values() for p in pts])
        ax.set_title(where + (" · Poisson arrivals" if kind == "rate" else ""), fontsize=10, color=INK)
    return to_png(fig, TITLES["serving_speedup"] + " (95% intervals)")


def _accuracy_speedup(summary: RunSummary, colors: dict[str, str]) -> bytes | None:
    by_t: dict[tuple[str, str, float], list[GroupSummary]] = {}
    for (target, dataset), gs in _panels(summary, lambda g: bool(g.accuracy)).items():
        for g in gs:
            by_t.setdefault((target, dataset, g.temperature), []).append(g)
    if not by_t:
        return None
    multi_t = len({k[2] for k in by_t}) > 1
    fig, axes = new_figure(2 * len(by_t), cols=2, panel=(5.0, 3.2))
    for i, ((target, dataset, temp), groups) in enumerate(by_t.items()):
        if multi_t:
            dataset = f"{dataset} T={temp:g}"
        groups = sorted(_lowest_load(groups), key=lambda g: (g.method_kind != "baseline",))
        key = sorted({k for g in groups for k in g.accuracy})[0]
        ax_acc, ax_sp = axes[2 * i], axes[2 * i + 1]
        names = [g.method for g in groups]
        accs = [g.accuracy.get(key) for g in groups]
        ax_acc.bar(range(len(groups)), [100 * (e.value or 0) if e else 0 for e in accs],
                   yerr=[[100 * v for v in side] for side in est_yerr(accs)], capsize=3,
                   color=[colors[n] for n in names], edgecolor=INK, linewidth=0.4)
        ax_acc.set_ylabel(f"{key} (%)")
        ax_acc.set_ylim(0, 100)
        ax_acc.set_title(f"{target} · {dataset}: accuracy", fontsize=10, color=INK)
        sps = [Estimate(value=1.0) if g.method_kind == "baseline" else g.speedup for g in groups]
        ax_sp.bar(range(len(groups)), [e.value if e and e.value is not None else 0 for e in sps], yerr=est_yerr(sps),
                  capsize=3, color=[colors[n] for n in names], edgecolor=INK, linewidth=0.4)
        ax_sp.axhline(1.0, color=BORDER, linestyle="--", linewidth=1)
        ax_sp.set_ylabel("speedup (× baseline tok/s)")
        ax_sp.set_title(f"{target} · {dataset}: speedup", fontsize=10, color=INK)
        for ax in (ax_acc, ax_sp):
            ax.grid(False, axis="x")
            ax.set_xticks(range(len(groups)), names, rotation=20, ha="right")
            ax.set_xlabel("method")
    return to_png(fig, TITLES["accuracy_speedup"] + " (95% intervals, smallest load)")


def make_figures(summary: RunSummary) -> dict[str, bytes]:
    """Every figure the summary has data for, as ``{name: PNG bytes}`` in a fixed order."""
    extra = {(r.method, r.method) for r in summary.extra.serving if r.method}
    families = {(g.family, g.method_kind) for g in summary.whole_groups if g.family}
    colors = method_colors({*((g.method, g.method_kind) for g in summary.whole_groups), *extra, *families})
    out: dict[str, bytes] = {}
    for name, fn in [("headline", plots_methods.headline_figure), ("step_time_vs_k", plots_methods.step_time_vs_k),
                     ("category_heatmap", plots_methods.category_heatmap),
                     ("tau", _tau), ("per_position", _per_position), ("speedup_vs_load", _speedup_vs_load),
                     ("latency_vs_throughput", _latency_vs_throughput), ("serving_speedup", _serving_speedup),
                     ("accuracy_speedup", _accuracy_speedup), ("goodput_vs_load", plots_deployment.goodput_vs_load_figure),
                     ("acceptance_along_output", plots_deployment.acceptance_along_output_figure),
                     ("step_share", plots_deployment.step_share_figure)]:
        png = fn(summary, colors)
        if png is not None:
            out[name] = png
    return out
