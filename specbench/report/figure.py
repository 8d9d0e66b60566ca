"""Figure primitives shared by every figure module: the palette, the titles, a
panelled matplotlib figure on the Agg canvas and its PNG bytes.

:mod:`specbench.report.plots`, :mod:`specbench.report.plots_methods` and
:mod:`specbench.report.trend` draw on these; this module imports none of them.
"""

from __future__ import annotations

import io
import math
import zlib
from collections.abc import Iterable, Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from specbench.stats import Estimate

FACE = "#ffffff"
BORDER = "#9aa0a6"
INK = "#202124"
GRID = "#dadce0"
DPI = 110

#: Fixed colours for the registry's methods (Tableau 10); other labels hash into PALETTE.
KNOWN_COLORS = {
    "baseline": "#7f7f7f", "eagle3": "#1f77b4", "p-eagle": "#ff7f0e", "dflash": "#2ca02c",
    "dspark": "#d62728", "ngram": "#9467bd", "draft_model": "#8c564b", "suffix": "#e377c2",
    "mtp": "#bcbd22", "pard": "#17becf",
}
PALETTE = [
    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354",
    "#756bb1", "#636363", "#6baed6", "#fd8d3c", "#74c476", "#9e9ac8", "#969696", "#ad494a",
]

MARKERS = ["o", "s", "^", "D"]
LINESTYLES = ["-", "--", ":", "-."]

TITLES = {
    "tau": "Mean acceptance length τ by method and dataset",
    "per_position": "Acceptance rate by draft position",
    "speedup_vs_load": "Speedup over the baseline by load",
    "latency_vs_throughput": "Latency against throughput across loads",
    "serving_speedup": "Serving: speedup over the baseline by load",
    "accuracy_speedup": "Task accuracy beside speedup",
    "headline": "Speedup over the reference method, paired by prompt",
    "step_time_vs_k": "Time per decoding step against K",
    "category_heatmap": "τ by prompt category (values in brackets: too few prompts for an interval)",
    "ab": "A/B: B/A per group with its interval",
    "goodput_vs_load": "Goodput under SLOs over no speculation's, by load",
    "acceptance_along_output": "Draft acceptance along the output",
    "step_share": "A decoding step: verification and drafting, each timed",
}


def method_colors(methods: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Colour per method label, stable across figures and runs.

    ``methods`` are ``(label, kind)`` pairs. A registry name keeps its fixed
    colour; a custom label takes its kind's colour when no other label uses
    it, otherwise a slot of PALETTE chosen by a CRC32 of the label (probing
    to the next free slot, in sorted order, so that one run's methods never
    share a colour while the palette lasts).
    """
    pairs = sorted(set(methods))
    out: dict[str, str] = {label: KNOWN_COLORS[label] for label, _ in pairs if label in KNOWN_COLORS}
    used = set(out.values())
    for label, kind in pairs:
        if label in out:
            continue
        if kind in KNOWN_COLORS and KNOWN_COLORS[kind] not in used:
            out[label] = KNOWN_COLORS[kind]
        else:
            start = zlib.crc32(label.encode()) % len(PALETTE)
            free = [PALETTE[(start + i) % len(PALETTE)] for i in range(len(PALETTE))]
            out[label] = next((c for c in free if c not in used), free[0])
        used.add(out[label])
    return out




def new_figure(n_panels: int, *, cols: int = 2, panel: tuple[float, float] = (5.2, 3.4)) -> tuple[Figure, list[Axes]]:
    cols = max(1, min(cols, n_panels))
    rows = math.ceil(n_panels / cols)
    if cols == 1:
        panel = (max(panel[0], 8.0), panel[1])
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows + 0.6), dpi=DPI, facecolor=FACE,
                 edgecolor=BORDER, linewidth=2, layout="constrained")
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(n_panels)]
    for ax in axes:
        ax.set_facecolor(FACE)
        ax.grid(True, color=GRID, linewidth=0.8)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return fig, axes


def to_png(fig: Figure, title: str) -> bytes:
    fig.suptitle(title, color=INK, fontsize=12)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor=FACE, edgecolor=BORDER, metadata={"Software": None})
    return buf.getvalue()


def est_values(ests: Sequence[Estimate | None]) -> list[float]:
    return [e.value if e is not None and e.value is not None else math.nan for e in ests]


def est_yerr(ests: Sequence[Estimate | None]) -> list[list[float]]:
    lo, hi = [], []
    for e in ests:
        if e is None or e.value is None or e.ci_low is None or e.ci_high is None:
            lo.append(0.0)
            hi.append(0.0)
        else:
            lo.append(max(0.0, e.value - e.ci_low))
            hi.append(max(0.0, e.ci_high - e.value))
    return [lo, hi]
