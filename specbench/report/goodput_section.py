"""The report's "Goodput under SLOs" section: every group's goodput under the suite's ``slo:``, each method's
ratio to no speculation at each load with its verdict, and the load where speculation stops raising goodput
(renders; the numbers are :mod:`specbench.analysis.goodput`'s and :mod:`specbench.analysis.goodput_vs_load`'s)."""

from __future__ import annotations

from specbench.config.suite import SLOSpec
from specbench.report.document import Block, Para, Section, Table
from specbench.results.fmt import dataset_label, fmt_est, fmt_load, fmt_metric, fmt_pct, fmt_speedup
from specbench.results.goodput_curve import GoodputCurve, GoodputPoint, GoodputSummary
from specbench.results.summary import GroupSummary, RunSummary

SLO_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "end-to-end latency"}

DEFINITION = (
    "Goodput = requests that succeeded and met every objective (each value at most its SLO; a request's TPOT is "
    "its own (latency − TTFT) / (output tokens − 1), 0 for a one-token output) **per second of the group's cell "
    "wall time** (Σ over repeats; a server cell: from its first send to its last response, `vllm bench serve`'s "
    "benchmark duration; in a run with speed rounds, the sum of its batches' walls): vLLM's `request_goodput`. "
    "TTFT and latency as each engine measures them: a server's client clock, or offline vLLM's own request "
    "stats (queued → first / last token, no HTTP). Interval: the Wilson interval of the share meeting the SLOs "
    "times requests / wall time (the wall held fixed); n: requests sent.")
RATIO = (
    "Ratio: goodput of the method over no speculation's at the same load. With speed rounds the per-round log "
    "ratios are decided by the headline's rule (`specbench ab`'s confidence sequence, ±5 % margin: *higher* / "
    "*lower* / *same* / *undecided*; the ratio is their geometric mean); otherwise the pooled ratio with a 95 % "
    "bootstrap over prompts paired across the arms (with rounds: over rounds, then prompts; *higher* / *lower* "
    "when the interval excludes 1, else *not distinguishable*).")


def slo_text(slo: SLOSpec) -> str:
    """'TTFT ≤ 200 ms, TPOT ≤ 20 ms' (vLLM's order)."""
    return ", ".join(f"{SLO_LABELS[k]} ≤ {v:g} ms" for k, v in slo.given().items())


def at_load(curve: GoodputCurve, load: float | None) -> str:
    """A load on a curve's axis for people ('16', '6 req/s')."""
    if load is None:
        return "–"
    return f"{load:g} req/s" if curve.axis == "request_rate" else f"{load:g}"


def _verdict(p: GoodputPoint) -> str:
    rounds = f" ({p.rounds} rounds)" if p.rounds else ""
    return f"{p.verdict}{rounds}"


def _group_table(groups: list[GroupSummary], points: dict[str, GoodputPoint]) -> Table:
    rows, pooled = [], {}
    for g in groups:
        p = points.get(g.group_id)
        rows.append([g.method, str(g.k) if g.k is not None else "–", f"{g.temperature:g}", fmt_load(g),
                     str(g.n_requests), fmt_metric("goodput", g.goodput), fmt_pct(g.goodput_share),
                     "1× (baseline)" if g.method_kind == "baseline" else fmt_speedup(p.ratio) if p else "–",
                     _verdict(p) if p else "–"])
        if p is not None and p.note:
            pooled.setdefault(p.note, []).append(f"{g.method} at {fmt_load(g)}")
    notes = [f"Decided on the pooled interval, not by the rounds, because {why}: {', '.join(where)}."
             for why, where in pooled.items()]
    return Table(["Method", "K", "T", "Load", "n", "Goodput (req/s)", "Meets the SLOs", "Ratio to no speculation",
                  "Verdict"], rows, notes)


def _stops_table(curves: list[GoodputCurve]) -> Table:
    rows = [[c.target, c.dataset + (f" {c.slice_id}" if c.slice_id else ""), f"{c.temperature:g}", c.method,
             "concurrency" if c.axis == "concurrency" else "request rate",
             " · ".join(f"{at_load(c, p.load)}: {p.verdict}" for p in c.points),
             at_load(c, c.raises_up_to) if c.raises_up_to is not None else "nowhere measured",
             at_load(c, c.stops_at) if c.stops_at is not None else "not within the loads measured"]
            for c in curves]
    return Table(["Target", "Dataset", "T", "Method", "Load axis", "Verdict by load", "Raises goodput up to",
                  "Stops raising it at"], rows,
                 ["Stops raising it at: the lowest load from which on no measured load's verdict is *higher* "
                  "(undecided counts as not shown to raise it)."])


def goodput_section(summary: RunSummary) -> Section | None:
    """The section, or None for a run without SLOs."""
    gp: GoodputSummary | None = summary.extra.goodput
    if gp is None:
        return None
    points = {p.group_id: p for c in gp.curves for p in c.points}
    blocks: list[Block] = [Para(f"SLOs: **{slo_text(gp.slo)}** (the suite's `slo:`, as `vllm bench serve "
                                f"--goodput`). {DEFINITION}"), Para(RATIO)]
    by_where: dict[tuple[str, str], list[GroupSummary]] = {}
    for g in summary.whole_groups:
        if g.goodput is not None:
            by_where.setdefault((g.target, dataset_label(g.dataset, g.group_id)), []).append(g)
    for (target, dataset), groups in by_where.items():
        groups.sort(key=lambda g: (g.request_rate is not None, g.request_rate or g.batch_size, g.temperature,
                                   g.method_kind != "baseline", g.method))
        blocks.append(Section(f"{target} · {dataset}", [_group_table(groups, points)], level=3))
    if not by_where:
        blocks.append(Para("No group has a goodput: its requests lack a timing an SLO needs, or its cells a wall "
                           "time (a resumed cell's covers only its last attempt)."))
    if gp.curves:
        blocks.append(Section("Where speculation stops raising goodput", [_stops_table(gp.curves)], level=3))
    return Section("Goodput under SLOs", blocks, anchor="goodput")


def goodput_lines(gp: GoodputSummary) -> list[list[str]]:
    """Per curve: target, dataset · T, method, 'up to …', 'stops at …' (the compact summary's rows)."""
    return [[c.target, f"{c.dataset} · T={c.temperature:g}", c.method,
             at_load(c, c.raises_up_to) if c.raises_up_to is not None else "nowhere measured",
             at_load(c, c.stops_at) if c.stops_at is not None else "not within the loads measured",
             "; ".join(f"{at_load(c, p.load)}: {fmt_est(p.ratio, 2, unit='×')}" for p in c.points)]
            for c in gp.curves]

