"""The report's "Early stopping" section: per cell, the prompts used of those
available, why it stopped and the confidence sequence it stopped on."""

from __future__ import annotations

from specbench.report.document import Para, Section, Table
from specbench.results import metric_catalog
from specbench.results.summary import RunSummary

#: The stop rule's metric names (``stop: {metric: tpot}``) as the table shows them.
METRIC_NAMES = {name: m.column for name, m in metric_catalog.stop_metrics().items()}
REASONS = {
    "target": "interval tight enough",
    "max_prompts": "reached max_prompts",
    "exhausted": "ran out of prompts",
}


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def stopping_section(summary: RunSummary) -> Section | None:
    rows = []
    used = available = 0
    for g in summary.whole_groups:
        for line in g.cells:
            s = line.stop
            if s is None:
                continue
            used += s.n_used
            available += s.n_available
            head, _, why = s.reason.partition(" (")
            reason = REASONS.get(head, head) + (f" ({why}" if why else "")
            interval = "–" if s.lo is None or s.hi is None else f"{_num(s.estimate)} [{_num(s.lo)}, {_num(s.hi)}]"
            target = "–" if s.target_half_width is None else f"±{_num(s.target_half_width, 2)}"
            rows.append([line.cell_id, METRIC_NAMES.get(s.rule.metric, s.rule.metric),
                         f"{s.n_used} / {s.n_available}", reason, interval, target])
    if not rows:
        return None
    share = f"{used / available:.0%}" if available else "–"
    return Section("Early stopping", [
        Para(f"Cells with a stop rule ran their prompts in a seeded random order and stopped once the "
             f"metric's anytime-valid confidence sequence was tight enough: {used} of {available} prompts "
             f"used ({share}). The intervals of a stopped cell are confidence sequences, valid at the "
             f"data-dependent point where it stopped; a paired cell never ran past its baseline's prompts."),
        Table(["cell", "metric", "prompts used", "why it stopped", "estimate [CS]", "target"], rows),
    ], anchor="early-stopping")
