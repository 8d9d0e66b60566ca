"""The schedule file as report blocks (pure; ``specbench schedule`` prints them, a run's report shows them).

Tables: the K sweep predicted from the largest K beside the measured τ (with the error and whether
it is within max(0.05, the measured half-width)); per workload its
``num_speculative_tokens_per_batch_size`` ranges with the predicted speedup of the chosen K and of the
runner-up, and the batch size from which speculation stops paying; and, where the run measured a
method with a schedule, per load that schedule against the same drafter at each fixed K (measured
and predicted), and whether the engine drafted as the schedule says.
"""

from __future__ import annotations

from specbench.report.document import Block, Para, Section, Table
from specbench.results.schedule_file import ScheduleFile, ScheduleLoadCheck
from specbench.stats import Estimate

TAU_NOTE = "τ = 1 + accepted / drafts, pooled over the group's requests (vLLM's definition); 95 % bootstrap intervals"


def _est(e: Estimate | None) -> str:
    return e.fmt(2) if e is not None and e.value is not None else "–"


def prediction_table(sf: ScheduleFile) -> Table:
    rows = []
    for p in sf.predictions:
        for pt in p.points:
            if pt.k == p.source_k:
                continue
            within = "–" if pt.tau_error is None or pt.tolerance is None else (
                "yes" if abs(pt.tau_error) <= pt.tolerance else "NO")
            err = "–" if pt.tau_error is None else f"{pt.tau_error:+.3f}"
            rows.append([p.target, p.method, p.drafter, p.dataset, f"{p.temperature:g}", f"K={p.source_k}", str(pt.k),
                         _est(pt.tau), _est(pt.measured_tau), err, within])
    return Table(["target", "method", "drafter", "dataset", "T", "from", "K", "τ predicted", "τ measured", "error",
                  "within"], rows, notes=[TAU_NOTE])


def schedule_table(sf: ScheduleFile) -> Table:
    rows = []
    for s in sf.schedules:
        stops = str(s.stops_paying_at) if s.stops_paying_at is not None else f"> {s.ranges[-1].hi} (not measured)"
        for r in s.ranges:
            runner = f"K={r.runner_up_k}: {_est(r.runner_up_speedup)}" if r.runner_up_k is not None else "–"
            rows.append([s.target, s.method, s.dataset, f"{s.temperature:g}", f"{r.lo}–{r.hi}", str(r.k),
                         _est(r.speedup), runner, stops])
    return Table(["target", "method", "dataset", "T", "batch sizes", "K", "speedup", "runner-up", "stops paying at"],
                 rows, notes=["speedup: predicted tokens per unit time over the baseline's (no drafter); stops "
                              "paying: the first batch size where no K reaches 1"])


def _load(c: ScheduleLoadCheck) -> str:
    return f"{c.request_rate:g} req/s" if c.request_rate is not None else f"concurrency {c.batch_size}"


def _ms(e: Estimate | None) -> str:
    return "–" if e is None or e.value is None else f"{e.value * 1e3:.2f}"


def _shares(d: dict[int, float]) -> str:
    return " · ".join(f"K{k} {v:.0%}" for k, v in sorted(d.items())) or "–"


def check_tables(sf: ScheduleFile) -> list[Table]:
    """Per load, the scheduled method against the same drafter at each fixed K (measured and predicted),
    then whether the engine drafted as the schedule says."""
    arms, honour = [], []
    for c in sf.checks:
        head = [c.target, c.method, c.dataset, f"{c.temperature:g}", _load(c)]
        for a in c.arms:
            best = "best fixed" if a.k is not None and a.k == c.best_fixed_k else ""
            tpot = "–" if a.predicted_tpot_s is None else f"{a.predicted_tpot_s * 1e3:.2f}"
            arms.append([*head, a.label, _est(a.tokens_per_step), _est(a.predicted_tokens_per_step), _ms(a.tpot_s),
                         tpot, _est(a.speedup), _est(a.predicted_speedup), best])
        d = "–" if c.drafted_per_step is None else f"{c.drafted_per_step:.2f}"
        w = "–" if c.drafted_per_step_expected is None else f"{c.drafted_per_step_expected:.2f}"
        inside = "–" if c.within_best is None else ("yes" if c.within_best else "no")
        honour.append([*head, str([list(e) for e in c.schedule]), d, w, _shares(c.k_share), _shares(c.k_share_expected),
                       f"{inside} (K={c.best_fixed_k})"])
    return [
        Table(["target", "method", "dataset", "T", "load", "run as", "tokens per step", "predicted", "TPOT ms",
               "predicted", "speedup", "predicted", "best"], arms,
              notes=["speedup: over the baseline at the same load (no drafter loaded), measured; predicted: from "
                     "the largest K's acceptance per position (tokens per step) and the step-time model at the "
                     "load's batch size (a rate load: its mean requests per step); predicted TPOT: the model's "
                     "step time over the predicted tokens per step (a point value); K=0: the drafter loaded, a "
                     "schedule of zeros; tokens per step: committed tokens / decoding steps"]),
        Table(["target", "method", "dataset", "T", "load", "schedule", "draft tokens per step", "schedule gives",
               "steps at each K", "schedule gives", "inside best fixed K"], honour,
              notes=["measured from vLLM's per-request metrics (each drafting step's draft tokens; steps without a "
                     "draft from the tokens left over); 'schedule gives': the schedule's K at each step's batch size "
                     "(requests in the engine then, estimated from send and finish times on a server)"]),
    ]


def schedule_blocks(sf: ScheduleFile, *, level: int = 2) -> list[Block]:
    """Every table of the schedule file as report sections."""
    blocks: list[Block] = [
        Section(f"τ(K) predicted from the largest K (run {sf.run_id})", [prediction_table(sf)], level=level),
        Section("num_speculative_tokens_per_batch_size (predicted speedup over no speculation)",
                [schedule_table(sf)], level=level),
    ]
    if sf.checks:
        blocks.append(Section("The schedule on the engine, per load", list(check_tables(sf)), level=level))
    if sf.skipped:
        blocks.append(Para("No schedule: " + "; ".join(sf.skipped)))
    return blocks


def schedule_section(sf: ScheduleFile) -> Section:
    """A run report's section: the schedule on the engine first, then the prediction it rests on."""
    return Section("Dynamic speculation: K per batch size", schedule_blocks(sf, level=3), anchor="schedule")


def render(sf: ScheduleFile) -> str:
    """The schedule file's tables as Markdown (``specbench schedule`` prints it)."""
    from specbench.report.markdown import md_blocks

    return "\n".join(md_blocks(schedule_blocks(sf))).rstrip("\n") + "\n"
