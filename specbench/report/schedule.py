"""The schedule file as Markdown tables (pure; ``specbench schedule`` prints them).

Two tables: the K sweep predicted from the largest K beside the measured τ (with the error and
whether it is within max(0.05, the measured half-width)), then per workload its
``num_speculative_tokens_per_batch_size`` ranges with the predicted speedup of the chosen K and
of the runner-up, and the batch size from which speculation stops paying.
"""

from __future__ import annotations

from specbench.results.schedule import ScheduleFile
from specbench.stats import Estimate


def _est(e: Estimate | None) -> str:
    return e.fmt(2) if e is not None and e.value is not None else "–"


def prediction_table(sf: ScheduleFile) -> str:
    lines = ["| target | method | drafter | dataset | T | from | K | τ predicted | τ measured | error | within |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sf.predictions:
        for pt in p.points:
            if pt.k == p.source_k:
                continue
            within = "–" if pt.tau_error is None or pt.tolerance is None else (
                "yes" if abs(pt.tau_error) <= pt.tolerance else "NO")
            err = "–" if pt.tau_error is None else f"{pt.tau_error:+.3f}"
            lines.append(f"| {p.target} | {p.method} | {p.drafter} | {p.dataset} | {p.temperature:g} | K={p.source_k} | {pt.k} "
                         f"| {_est(pt.tau)} | {_est(pt.measured_tau)} | {err} | {within} |")
    return "\n".join(lines)


def schedule_table(sf: ScheduleFile) -> str:
    lines = ["| target | method | dataset | T | batch sizes | K | speedup | runner-up | stops paying at |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in sf.schedules:
        stops = str(s.stops_paying_at) if s.stops_paying_at is not None else f"> {s.ranges[-1].hi} (not measured)"
        for r in s.ranges:
            runner = f"K={r.runner_up_k}: {_est(r.runner_up_speedup)}" if r.runner_up_k is not None else "–"
            lines.append(f"| {s.target} | {s.method} | {s.dataset} | {s.temperature:g} | {r.lo}–{r.hi} | {r.k} | {_est(r.speedup)} "
                         f"| {runner} | {stops} |")
    return "\n".join(lines)


def render(sf: ScheduleFile) -> str:
    parts = [f"## τ(K) predicted from the largest K (run {sf.run_id})", "", prediction_table(sf), "",
             "## num_speculative_tokens_per_batch_size (predicted speedup over no speculation)", "",
             schedule_table(sf)]
    if sf.skipped:
        parts += ["", "No schedule: " + "; ".join(sf.skipped)]
    return "\n".join(parts) + "\n"
