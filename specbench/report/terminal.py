"""The closing table of ``specbench run`` / ``analyze`` in a terminal (pure: rows of strings).

One table per target (its name as the title), six short columns that fit
100 characters: dataset, method (with K), T and load, τ with its interval,
speedup with its interval, verdict. The
verdict is the group's equivalence verdict when it has one, else its status
when it did not run; the full story is in the reports. Below the tables, one
line says where the run's wall time went (:func:`time_line`).
"""

from __future__ import annotations

from typing import Any

from specbench.analysis.timing import TimeBreakdown, fmt_duration, fmt_share, harness_parts
from specbench.results.summary import GroupSummary, RunSummary

HEADER = ("dataset", "method", "T·load", "τ [95% CI]", "speedup [95% CI]", "verdict")
#: Width every column may take; the widest row is under 100 characters with the separators.
MAX_WIDTHS = (12, 18, 10, 18, 18, 12)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def verdict(g: GroupSummary) -> str:
    if g.status in ("skipped", "failed"):
        return g.status
    entries = g.equivalence.tests(g.temperature) if g.equivalence is not None else []
    verdicts = sorted({str(e.verdict) for _, e in entries})
    if not verdicts:
        return "–" if g.status == "ok" else g.status
    return " / ".join("not shown" if v == "not shown equivalent" else v for v in verdicts)


def closing_rows(summary: RunSummary) -> dict[str, list[tuple[str, ...]]]:
    """Target name → its rows, in the summary's order."""
    rows: dict[str, list[tuple[str, ...]]] = {}
    for g in summary.groups:
        load = f"b{g.batch_size}" if g.request_rate is None else f"r{g.request_rate:g}"
        method = g.method + (f" K{g.k}" if g.k and f"k{g.k}" not in g.method.lower() else "")
        cells = (
            g.dataset, method, f"{g.temperature:g}·{load}",
            g.tau.fmt() if g.tau and g.tau.value is not None else "–",
            g.speedup.fmt() if g.speedup and g.speedup.value is not None else "–",
            verdict(g),
        )
        rows.setdefault(g.target, []).append(tuple(_clip(c, w) for c, w in zip(cells, MAX_WIDTHS, strict=True)))
    return rows


def time_line(breakdown: TimeBreakdown | dict[str, Any] | None) -> str | None:
    """'wall 5m55s: engine starts 2m10s (37 %), cells 1m06s (19 %), harness 2m39s (45 %): warmups 40s, …'
    (the harness: everything but engine starts and measured cells; see :mod:`specbench.analysis.timing`)."""
    if not breakdown:
        return None
    bd = breakdown if isinstance(breakdown, TimeBreakdown) else TimeBreakdown.model_validate(breakdown)
    starts, cells = bd.wall_of("engine_start"), bd.wall_of("cells")

    def share(s: float) -> str:
        return fmt_share(s / bd.wall_s if bd.wall_s > 0 else 0.0)

    head = (f"wall {fmt_duration(bd.wall_s)}: engine starts {fmt_duration(starts)} ({share(starts)}), "
            f"cells {fmt_duration(cells)} ({share(cells)}), harness {fmt_duration(bd.harness_s)} ({share(bd.harness_s)})")
    parts = harness_parts(bd)
    return head + (": " + ", ".join(f"{name} {fmt_duration(s)}" for name, s in parts) if parts else "")
