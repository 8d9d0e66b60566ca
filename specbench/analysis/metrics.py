"""A group's speed and agreement metrics over raw records, and every group's summary (pure).

Definitions (see DESIGN.md; each speed formula is :mod:`specbench.results.speed_estimators`'):

* acceptance (τ pooled and per request, per-position rates, draft acceptance rate):
  :mod:`specbench.analysis.group_acceptance`.
* output tokens/s = Σ output tokens / Σ request latency (the rate one
  stream sees); throughput = Σ output tokens / Σ cell wall time
  (:func:`~specbench.results.speed_estimators.token_rate`).
* speedup = a method's output tokens/s over the baseline group's with the
  same target, dataset, temperature and load, bootstrapped over prompts
  paired across the two groups (:func:`~specbench.results.speed_estimators.throughput_ratio`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from specbench import stats
from specbench.analysis import step_accounting, step_time
from specbench.analysis.goodput import group_goodput
from specbench.analysis.group_acceptance import acceptance, non_degenerate, sum_counters
from specbench.analysis.serving_metrics import SLO
from specbench.config.plan import Cell
from specbench.config.stop_rule import StopRecord
from specbench.config.suite import ReferenceValue
from specbench.results import metric_catalog, speed_estimators
from specbench.results.degeneracy import is_degenerate
from specbench.results.parts import Equivalence
from specbench.results.records import CellRecord, RequestRecord, SpecCounters
from specbench.results.slices import Slice
from specbench.results.summary import (
    CellStatusLine,
    GroupSummary,
    RunSummary,
    TurnOneIdentity,
    is_ratio_reference,
    reference_applies,
)
from specbench.stats import Estimate

E = TypeVar("E", Estimate, Estimate | None)
PairKey = tuple[str, int, int]  # prompt_id, sample_index, repeat


def latest_cell_records(cell_records: Iterable[CellRecord]) -> dict[str, CellRecord]:
    """The last attempt of each cell (records are append-only)."""
    out: dict[str, CellRecord] = {}
    for c in cell_records:
        out[c.cell_id] = c
    return out


def complete_conversations(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """Records outside conversations as they are; of each conversation (cell, conversation,
    sample) only its last complete attempt: turns 1..n in order, n its ``conversation_turns``
    or fewer when its last turn errored (later turns were not sent). A conversation's turns
    are written together once it ends, so an attempt a stop cut short (torn between its
    appends) is dropped here and the redone conversation counts, once."""
    plain: list[RequestRecord] = []
    attempts: dict[tuple[str, str, int], list[list[RequestRecord]]] = defaultdict(list)
    for r in records:
        if r.conversation_id is None:
            plain.append(r)
            continue
        tries = attempts[(r.cell_id, r.conversation_id, r.sample_index)]
        if r.turn == 1 or not tries:
            tries.append([])
        tries[-1].append(r)

    def complete(turns: list[RequestRecord]) -> bool:
        n = turns[0].conversation_turns or len(turns)
        in_order = [t.turn for t in turns] == list(range(1, len(turns) + 1))
        return in_order and (len(turns) == n or (turns[-1].error is not None and len(turns) < n))

    out = plain
    for tries in attempts.values():
        whole = [t for t in tries if complete(t)]
        ok = [t for t in whole if all(r.error is None for r in t)]
        if whole:
            out += (ok or whole)[-1]
    return out


def unique_requests(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """One record per (cell, prompt, sample): the first successful attempt, else
    the first failed one (a request that errored is retried on resume); of a
    conversation, its last complete attempt (:func:`complete_conversations`)."""
    chosen: dict[tuple[str, str, int], RequestRecord] = {}
    for r in complete_conversations(records):
        key = (r.cell_id, r.prompt_id, r.sample_index)
        prev = chosen.get(key)
        if prev is None or (prev.error is not None and r.error is None):
            chosen[key] = r
    return list(chosen.values())


def declared_metrics(counters: SpecCounters | None, requests: Sequence[RequestRecord]) -> dict[str, Estimate]:
    """The catalogue's metrics computed from their declaration (``MetricSpec.compute``) over a group's pooled
    counters (None for a baseline) and requests; those without a value left out."""
    out = {}
    for m in metric_catalog.computed_metrics():
        est = m.compute(counters, requests) if m.compute is not None else None
        if est is not None:
            out[m.name] = est
    return out


class Speed(NamedTuple):
    """A group's speed over its requests (the :class:`GroupSummary` fields of the same names)."""

    output_tps: Estimate
    latency_s: Estimate
    latency_p50_s: float | None
    latency_p90_s: float | None
    latency_p99_s: float | None
    ttft_s: Estimate


def speed(requests: Sequence[RequestRecord]) -> Speed:
    """Output tok/s per stream (Σ tokens / Σ latency: :func:`~specbench.results.speed_estimators.token_rate`,
    bootstrapped over requests and speed rounds), latency (mean and percentiles) and TTFT of the successful
    timed requests."""
    ok = [r for r in requests if r.error is None and r.latency_s]
    toks = [r.num_output_tokens for r in ok]
    lats = [float(r.latency_s or 0.0) for r in ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    return Speed(
        output_tps=stats.ratio_ci(toks, lats, [r.round for r in ok], estimator=speed_estimators.token_rate),
        latency_s=stats.mean_ci(lats),
        latency_p50_s=stats.percentile(lats, 50),
        latency_p90_s=stats.percentile(lats, 90),
        latency_p99_s=stats.percentile(lats, 99),
        ttft_s=stats.mean_ci([float(t) for t in ttfts]),
    )


def assign_speed(g: GroupSummary, sp: Speed) -> None:
    """Store ``sp`` in the group's speed fields."""
    g.output_tps = sp.output_tps
    g.latency_s = sp.latency_s
    g.latency_p50_s = sp.latency_p50_s
    g.latency_p90_s = sp.latency_p90_s
    g.latency_p99_s = sp.latency_p99_s
    g.ttft_s = sp.ttft_s


def _pair_map(requests: Sequence[RequestRecord]) -> dict[PairKey, RequestRecord]:
    return {(r.prompt_id, r.sample_index, r.repeat): r for r in requests if r.error is None}


def paired_speedup(method: Sequence[RequestRecord], baseline: Sequence[RequestRecord]) -> Estimate:
    """(Σ tok_m / Σ lat_m) / (Σ tok_b / Σ lat_b) over prompts present in both
    (:func:`~specbench.results.speed_estimators.throughput_ratio`).

    Bootstrap over prompt ids (all samples and repeats of a prompt move
    together), so prompt difficulty is paired out. In a run with speed rounds
    a prompt's method and baseline requests share a round (the same split of
    the same prompts), and the interval is the round bootstrap over rounds and
    prompts (:func:`specbench.stats.by_rounds`): drift between rounds widens it.
    """
    m, b = _pair_map(method), _pair_map(baseline)
    by_prompt: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    round_of: dict[str, int | None] = {}
    for key in m.keys() & b.keys():
        rm, rb = m[key], b[key]
        if not rm.latency_s or not rb.latency_s:
            continue
        round_of[key[0]] = rm.round
        row = by_prompt[key[0]]
        row[0] += rm.num_output_tokens
        row[1] += rm.latency_s
        row[2] += rb.num_output_tokens
        row[3] += rb.latency_s
    if not by_prompt:
        return Estimate(value=None, n=0)
    prompts = sorted(by_prompt)
    arr = np.array([by_prompt[p] for p in prompts], float)

    def ratio(a: np.ndarray) -> float:
        s = a.sum(axis=0)
        if s[1] <= 0 or s[2] <= 0 or s[3] <= 0:
            return float("nan")
        return float(speed_estimators.throughput_ratio(s[0], s[1], s[2], s[3]))

    def ratios(blk: np.ndarray) -> np.ndarray:  # ratio of each resample in a block (b, n, 4)
        s = blk.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = speed_estimators.throughput_ratio(s[:, 0], s[:, 1], s[:, 2], s[:, 3])
        return np.where((s[:, 1] > 0) & (s[:, 2] > 0) & (s[:, 3] > 0), out, np.nan)

    return stats.by_rounds(arr, ratio, [round_of[p] for p in prompts], batched=ratios)


class TurnPairing(NamedTuple):
    """A method's and its baseline's records fit to compare: single requests (a replayed recorded
    turn too) and first turns as they are, later turns only of conversations whose turn 1 was token-identical in both
    (a later turn's prompt holds the engine's own turn-1 reply: after a different reply the
    two arms answer different prompts). ``identical`` of ``conversations`` (those with a later
    turn) had that turn 1."""

    method: list[RequestRecord]
    baseline: list[RequestRecord]
    identical: int
    conversations: int


def pair_turns(method: Sequence[RequestRecord], baseline: Sequence[RequestRecord]) -> TurnPairing:
    first = {(r.conversation_id, r.sample_index, r.repeat): r.output_token_ids
             for r in baseline if r.turn == 1 and r.error is None}
    same: set[tuple[str | None, int, int]] = set()
    convs = 0
    for r in method:  # conversations with a later turn
        if (r.turn == 1 and (r.conversation_turns or 1) > 1 and r.error is None
                and (key := (r.conversation_id, r.sample_index, r.repeat)) in first):
            convs += 1
            if first[key] == r.output_token_ids:
                same.add(key)

    def keep(reqs: Sequence[RequestRecord]) -> list[RequestRecord]:
        return [r for r in reqs if r.conversation_id is None or r.turn == 1
                or (r.conversation_id, r.sample_index, r.repeat) in same]

    return TurnPairing(keep(method), keep(baseline), len(same), convs)


def greedy_match(method: Sequence[RequestRecord], baseline: Sequence[RequestRecord]) -> Estimate:
    """Share of paired requests whose token ids equal the baseline's."""
    m, b = _pair_map(method), _pair_map(baseline)
    keys = sorted(m.keys() & b.keys())
    same = sum(1 for k in keys if m[k].output_token_ids == b[k].output_token_ids)
    return stats.wilson(same, len(keys))


def _scores_by_metric(requests: Sequence[RequestRecord], scores: Mapping) -> dict[str, dict[str, list[bool]]]:
    out: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for r in requests:
        for metric, ok in scores.get((r.cell_id, r.prompt_id, r.sample_index), {}).items():
            if isinstance(ok, bool):
                out[metric][r.prompt_id].append(ok)
    return out


def group_accuracy(requests: Sequence[RequestRecord], scores: Mapping) -> dict[str, Estimate]:
    from specbench.scoring.accuracy import accuracy

    return {m: accuracy(per_prompt) for m, per_prompt in _scores_by_metric(requests, scores).items() if per_prompt}


def accuracy_delta(method: Sequence[RequestRecord], baseline: Sequence[RequestRecord], scores: Mapping) -> dict[str, Estimate]:
    """Method accuracy minus baseline accuracy on the same prompts (paired)."""
    from specbench.scoring.accuracy import paired_delta

    m, b = _scores_by_metric(method, scores), _scores_by_metric(baseline, scores)
    out: dict[str, Estimate] = {}
    for metric in sorted(m.keys() & b.keys()):  # sorted: a summary's bytes do not depend on the hash seed
        if set(m[metric]) & set(b[metric]):
            out[metric] = paired_delta(m[metric], b[metric])
    return out


def requests_by_group(
    cells: Sequence[Cell], latest: dict[str, CellRecord], reqs: Sequence[RequestRecord]
) -> dict[str, list[RequestRecord]]:
    """Each group's requests from its ok cells (``latest``: :func:`latest_cell_records`; ``reqs``:
    :func:`unique_requests`)."""
    by_cell: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in reqs:
        by_cell[r.cell_id].append(r)
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for c in cells:
        out[c.group_id]  # every group has an entry, ok or not
        cr = latest.get(c.cell_id)
        if cr is not None and cr.status == "ok":
            out[c.group_id] += by_cell.get(c.cell_id, [])
    return dict(out)


def non_degenerate_speedup(g: GroupSummary, method: Sequence[RequestRecord],
                           baseline: Sequence[RequestRecord]) -> Estimate | None:
    """:func:`paired_speedup` on the prompts where neither arm's output is degenerate (the group's own
    speedup when no request of either arm is)."""
    m = [r for r in method if not is_degenerate(r)]
    b = [r for r in baseline if not is_degenerate(r)]
    if len(m) == len(method) and len(b) == len(baseline):
        return g.speedup
    return paired_speedup(m, b)


def _group_status(statuses: Sequence[str]) -> str:
    if not statuses:
        return "pending"
    if all(s == "ok" for s in statuses):
        return "ok"
    if all(s == "skipped" for s in statuses):
        return "skipped"
    if all(s == "failed" for s in statuses):
        return "failed"
    return "partial"


def summarize(
    run_id: str,
    suite_name: str,
    cells: Sequence[Cell],
    cell_records: Iterable[CellRecord],
    requests: Iterable[RequestRecord],
    references: Sequence[dict] = (),
    scores: dict[tuple[str, str, int], dict] | None = None,
) -> RunSummary:
    """Every group's metrics (:func:`summarize_groups`) as a summary with nothing else in it."""
    return RunSummary(run_id=run_id, suite_name=suite_name,
                      groups=summarize_groups(cells, cell_records, requests, references, scores))


class _Stopped(NamedTuple):
    """A group's one cell that stopped early: its stop record, its records and its paired baseline's."""

    stop: StopRecord
    records: list[RequestRecord]
    paired: list[RequestRecord]


def _stopped_cell(gcells: Sequence[Cell], lines: Sequence[CellStatusLine], by_cell: Mapping[str, list[RequestRecord]],
                  baseline_of: Mapping[tuple[Any, int], str]) -> _Stopped | None:
    """The group's one cell when it stopped early on a metric it could measure.

    Repeats pool several cells: their bootstrap stays (each cell's own interval is in its stop
    record); a cell that could not measure the rule's metric ran a fixed number of prompts."""
    if len(gcells) != 1 or len(lines) != 1:
        return None
    line, cell = lines[0], gcells[0]
    if line.stop is None or line.status != "ok" or line.stop.estimate is None:
        return None
    paired = by_cell.get(baseline_of.get((cell.baseline_group_key, cell.repeat), ""), [])
    return _Stopped(line.stop, by_cell.get(cell.cell_id, []), paired)


def _chosen(stopped: _Stopped | None, metric: str, computed: E, refs: Mapping[str, str | None]) -> E | Estimate:
    """A metric's estimate: the confidence sequence its cell stopped on when it stopped early (and
    the metric was measured), else the one computed."""
    from specbench.analysis.cell_stopper import stopped_interval

    if stopped is None or computed is None:
        return computed
    cs = stopped_interval(stopped.stop, stopped.records, stopped.paired, refs, metric)
    return cs if cs is not None else computed


class _RunRecords(NamedTuple):
    """A run's records as every group reads them."""

    latest: dict[str, CellRecord]  # :func:`latest_cell_records`
    by_cell: dict[str, list[RequestRecord]]  # :func:`unique_requests` by cell
    group_requests: dict[str, list[RequestRecord]]  # :func:`requests_by_group`
    baseline_of: dict[tuple[Any, int], str]  # (baseline group key, repeat) → the baseline's cell


def _run_records(cells: Sequence[Cell], cell_records: Iterable[CellRecord],
                 requests: Iterable[RequestRecord]) -> _RunRecords:
    latest = latest_cell_records(cell_records)
    reqs = unique_requests(requests)
    by_cell: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in reqs:
        by_cell[r.cell_id].append(r)
    return _RunRecords(latest, by_cell, requests_by_group(cells, latest, reqs),
                       {(c.baseline_group_key, c.repeat): c.cell_id for c in cells if c.method_kind == "baseline"})


def _status_lines(gcells: Sequence[Cell], latest: Mapping[str, CellRecord]) -> list[CellStatusLine]:
    """Each cell of a group: its latest status, why, its engine's log tail and its stop record."""
    lines = []
    for c in gcells:
        cr = latest.get(c.cell_id)
        lines.append(CellStatusLine(cell_id=c.cell_id, status=cr.status if cr else "pending",
                                    reason=cr.reason if cr else None,
                                    engine_log_tail=cr.engine_log_tail if cr else None,
                                    stop=cr.stop if cr else None))
    return lines


def _new_group(gid: str, gcells: Sequence[Cell], lines: Sequence[CellStatusLine], greqs: Sequence[RequestRecord],
               equivalence: Mapping[str, Equivalence], scoring_notes: Mapping[str, str]) -> GroupSummary:
    """A group's summary before its metrics: its cells' key, status and counts."""
    c0 = gcells[0]
    return GroupSummary(
        group_id=gid, target=c0.target, method=c0.method, method_kind=c0.method_kind, k=c0.k, family=c0.family,
        dataset=c0.dataset, temperature=c0.temperature, batch_size=c0.batch_size, request_rate=c0.request_rate,
        schedule=c0.schedule, lossy=c0.lossy, status=_group_status([ln.status for ln in lines]),
        reasons=sorted({ln.reason for ln in lines if ln.reason and ln.status != "ok"}), cells=list(lines),
        n_requests=len(greqs), n_errors=sum(1 for r in greqs if r.error is not None),
        output_tokens=sum(r.num_output_tokens for r in greqs if r.error is None),
        equivalence=equivalence.get(gid), scoring_note=scoring_notes.get(c0.dataset),
        slice=Slice(input_tokens=c0.input_tokens) if c0.input_tokens is not None else None,
    )


def _measure_acceptance(g: GroupSummary, counters: SpecCounters, greqs: Sequence[RequestRecord],
                        stopped: _Stopped | None, refs: Mapping[str, str | None]) -> None:
    """A speculative group's acceptance, verification spent and step-trace metrics."""
    g.counters = counters
    acc = acceptance(counters, greqs, g.k)
    g.tau = _chosen(stopped, "tau", acc.tau, refs)
    g.tau_per_request = acc.tau_per_request
    g.per_position = acc.per_position
    g.draft_acceptance_rate = acc.draft_acceptance_rate
    g.verification = step_time.verification_spent(counters, greqs)
    steps = step_accounting.step_metrics(greqs)
    if steps is not None:
        g.tokens_per_step = steps.tokens_per_step
        g.tokens_per_step_per_request = steps.tokens_per_step_per_request
        g.terminal_overcount = steps.terminal_overcount
        g.draft_rate = steps.draft_rate
    g.steps_note = step_accounting.trace_note(greqs)
    g.non_degenerate = non_degenerate(g, greqs)


def _throughput(ok_cells: Sequence[Cell], run: _RunRecords) -> Estimate | None:
    """Σ output tokens / wall time of each ok cell (a repeat), t-interval over repeats; None when a cell
    has no wall time."""
    if not all(run.latest[c.cell_id].wall_time_s for c in ok_cells):
        return None
    per_rep = [speed_estimators.token_rate(sum(r.num_output_tokens for r in run.by_cell.get(c.cell_id, [])),
                                           run.latest[c.cell_id].wall_time_s or 1) for c in ok_cells]
    return stats.t_interval(per_rep) if len(per_rep) > 1 else Estimate(value=per_rep[0], n=1)


def _measure_speed(g: GroupSummary, ok_cells: Sequence[Cell], run: _RunRecords, greqs: Sequence[RequestRecord],
                   stopped: _Stopped | None, refs: Mapping[str, str | None]) -> None:
    """A measured group's speed: tok/s, latency, TTFT, TPOT, time per step and throughput."""
    assign_speed(g, speed(greqs))
    g.tpot_s = _chosen(stopped, "tpot", step_time.tpot_estimate(greqs), refs)
    g.step_time_s = step_time.step_time_estimate(greqs, speculative=g.method_kind != "baseline")
    g.throughput_tps = _throughput(ok_cells, run)


def _measure_quality(g: GroupSummary, greqs: Sequence[RequestRecord], scores: Mapping, stopped: _Stopped | None,
                     refs: Mapping[str, str | None], references: Sequence[dict]) -> None:
    """A group's task accuracy, the catalogue's computed metrics and the published values that apply."""
    g.accuracy = dict(group_accuracy(greqs, scores))
    g.metrics = declared_metrics(g.counters, greqs)
    if stopped is not None and stopped.stop.rule.metric == "accuracy" and "strict" in g.accuracy:
        g.accuracy["strict"] = _chosen(stopped, "accuracy", g.accuracy["strict"], refs)
    for ref in references:
        if not is_ratio_reference(ref) and reference_applies(
            ref, target=g.target, methods=(g.method, g.family), dataset=g.dataset, temperature=g.temperature,
            k=g.k,
        ):
            compared_with = metric_catalog.reference_metric(ref.get("metric", "tau"), ref.get("definition"))
            g.reference = {**(g.reference or {}), compared_with: ReferenceValue.model_validate(ref)}


def _compare_with_baselines(summaries: Mapping[str, GroupSummary], group_requests: Mapping[str, list[RequestRecord]],
                            stopped: Mapping[str, _Stopped | None], refs: Mapping[str, str | None],
                            scores: Mapping) -> None:
    """Each speculative group against the baseline group of the same target/dataset/T/load: speedup,
    accuracy change, greedy identity and turn-1 identity."""
    baselines = {g.baseline_key: gid for gid, g in summaries.items()
                 if g.method_kind == "baseline" and g.status in ("ok", "partial")}
    for gid, g in summaries.items():
        if g.method_kind == "baseline" or not group_requests[gid]:
            continue
        bid = baselines.get(g.baseline_key)
        if bid is None:
            continue
        base = group_requests[bid]
        pairs = pair_turns(group_requests[gid], base)
        g.speedup = _chosen(stopped[gid], "speedup", paired_speedup(pairs.method, pairs.baseline), refs)
        if g.non_degenerate is not None:
            g.non_degenerate.speedup = non_degenerate_speedup(g, pairs.method, pairs.baseline)
        g.accuracy_delta = accuracy_delta(group_requests[gid], base, scores)
        if g.temperature == 0:
            g.greedy_match = greedy_match(pairs.method, pairs.baseline)
        if pairs.conversations:
            g.turn1_identical = TurnOneIdentity(identical=pairs.identical, conversations=pairs.conversations)


def summarize_groups(
    cells: Sequence[Cell],
    cell_records: Iterable[CellRecord],
    requests: Iterable[RequestRecord],
    references: Sequence[dict] = (),
    scores: dict[tuple[str, str, int], dict] | None = None,
    *,
    prompt_references: Mapping[str, str | None] | None = None,
    equivalence: Mapping[str, Equivalence] | None = None,
    scoring_notes: Mapping[str, str] | None = None,
    slo: SLO | None = None,
) -> list[GroupSummary]:
    """Every group's metrics, from the plan's cells and the raw records.

    ``scores`` (from :mod:`specbench.scoring.apply`) adds task accuracy per
    group and its paired difference from the baseline group.

    A group whose one cell stopped early (a stop rule) reports τ, speedup, TPOT (and, for an
    accuracy rule, strict accuracy) with the confidence sequence it stopped on, chosen here
    where each metric is computed: a bootstrap interval re-checked after every block would
    cover less than it claims. ``prompt_references`` (prompt id → reference answer) scores
    such a cell's accuracy. ``equivalence`` (group id → lossless checks) and ``scoring_notes``
    (dataset → why it was not scored) are copied onto their groups. ``slo``: the suite's objectives, each
    group's goodput under them (:func:`specbench.analysis.goodput.group_goodput`).
    """
    scores = scores or {}
    refs = prompt_references or {}
    run = _run_records(cells, cell_records, requests)
    groups: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        groups[c.group_id].append(c)
    summaries: dict[str, GroupSummary] = {}
    stopped: dict[str, _Stopped | None] = {}
    for gid, gcells in groups.items():
        lines = _status_lines(gcells, run.latest)
        greqs = run.group_requests[gid]
        stopped[gid] = _stopped_cell(gcells, lines, run.by_cell, run.baseline_of)
        g = _new_group(gid, gcells, lines, greqs, equivalence or {}, scoring_notes or {})
        ok_cells = [c for c in gcells if (cr := run.latest.get(c.cell_id)) is not None and cr.status == "ok"]
        counters = sum_counters(run.latest[c.cell_id].counters for c in ok_cells)
        if counters is not None and g.method_kind != "baseline":
            _measure_acceptance(g, counters, greqs, stopped[gid], refs)
        if greqs:
            _measure_speed(g, ok_cells, run, greqs, stopped[gid], refs)
        measured = group_goodput(greqs, [run.latest[c.cell_id] for c in ok_cells], slo) if slo is not None else None
        if measured is not None:
            g.goodput, g.goodput_share = measured
        _measure_quality(g, greqs, scores, stopped[gid], refs, references)
        summaries[gid] = g
    _compare_with_baselines(summaries, run.group_requests, stopped, refs, scores)
    return list(summaries.values())
