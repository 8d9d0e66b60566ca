"""Serving summaries: latency percentiles, throughput, goodput, speedup vs load (pure).

Input is request records (``RequestRecord``) as the server engine writes
them: client-side TTFT, per-token ITLs (multi-token chunks already spread
over their tokens, see ``specbench.engines.stream_client``) and end-to-end latency.
Nothing here reads clocks, files or the network.

Definitions (per cell):

* TTFT, latency: per successful request; TPOT = (latency − TTFT) / (tokens − 1)
  per request with ≥ 2 tokens (:func:`specbench.results.speed_estimators.tpot`); ITL percentiles pool
  every token gap of the cell.
* Output throughput = output tokens of successful requests / cell wall time
  (:func:`~specbench.results.speed_estimators.token_rate`); total throughput adds their prompt tokens;
  request throughput = successful requests / wall time.
* Goodput = requests meeting every given SLO / wall time (failed requests
  never meet it; :func:`~specbench.results.speed_estimators.goodput`, vLLM's ``request_goodput``);
  ``goodput_fraction`` is over all requests sent. A group's, with its interval, and its ratio to no
  speculation: :mod:`specbench.analysis.goodput`, :mod:`specbench.analysis.goodput_vs_load`.
* Speedup of a method over the baseline at the same load — the same
  concurrency (closed loop) or the same Poisson request rate (open loop):
  TPOT speedup = pooled TPOT(baseline) / pooled TPOT(method), each Σ (latency − TTFT) /
  Σ (tokens − 1) over the arm's requests (:func:`~specbench.results.speed_estimators.tpot_ratio`);
  throughput speedup = per-stream token rate ratio, (Σ tokens / Σ latency)(method) over the same for
  the baseline (:func:`~specbench.results.speed_estimators.throughput_ratio`) — at a fixed number of
  streams Little's law makes that the ratio
  of output throughputs, and unlike a wall-clock ratio it has a sampling
  distribution over requests. At a fixed request rate below saturation both
  arms deliver the offered load, so their wall-clock throughputs agree; the
  per-stream rate ratio then says how much faster each request was served.
  95% intervals: percentile bootstrap resampling requests of each arm
  independently, seeded.
* A cell against its baseline's and its reference method's cell at the same load and repeat
  (:func:`comparison_cells`, :func:`compare_cells`): the pooled TPOT ratio and the ratio of aggregate
  output tok/s (Σ tokens / wall time), point values the report's serving table shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from specbench.config.plan import Cell
from specbench.results import counters as spec_counters
from specbench.results import speed_estimators
from specbench.results.parts import (
    Dist,
    Load,
    Rate,
    ServingComparison,
    ServingSummary,
    Speedup,
    SpeedupMetric,
)
from specbench.results.records import RequestRecord, SpecCounters
from specbench.stats import DEFAULT_RESAMPLES, DEFAULT_SEED, Estimate, bootstrap_two_sample

QUANTILES = (50.0, 90.0, 99.0)


class SLO(BaseModel):
    """Service-level objectives for goodput (seconds; ``None`` = not constrained)."""

    model_config = ConfigDict(extra="forbid")

    ttft_s: float | None = None
    tpot_s: float | None = None
    latency_s: float | None = None


def error_kind(rec: RequestRecord) -> str | None:
    """The kind prefix of a record's error (``"timeout: …"`` → ``"timeout"``)."""
    return None if rec.error is None else rec.error.split(":", 1)[0]


def _decode(rec: RequestRecord) -> tuple[float, int] | None:
    """(latency − TTFT, tokens − 1) of a request; ``None`` with fewer than 2 tokens or no timings."""
    n = rec.num_output_tokens
    if n < 2 and rec.itl_s:
        n = len(rec.itl_s) + 1  # servers without token ids
    if n < 2 or rec.latency_s is None or rec.ttft_s is None:
        return None
    return rec.latency_s - rec.ttft_s, n - 1


def request_tpot(rec: RequestRecord) -> float | None:
    """(latency − TTFT) / (tokens − 1); ``None`` with fewer than 2 tokens or no timings."""
    d = _decode(rec)
    return None if d is None else speed_estimators.tpot(*d)


def dist(values: Iterable[float | None]) -> Dist:
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return Dist()
    p = np.percentile(arr, QUANTILES)
    return Dist(n=int(arr.size), mean=float(arr.mean()), p50=float(p[0]), p90=float(p[1]), p99=float(p[2]))


def meets_slo(rec: RequestRecord, slo: SLO) -> bool:
    """Whether a successful request met every constrained SLO.

    A request with fewer than two tokens has no TPOT and cannot violate a TPOT limit.
    """
    if rec.error is not None:
        return False
    if slo.ttft_s is not None and (rec.ttft_s is None or rec.ttft_s > slo.ttft_s):
        return False
    if slo.latency_s is not None and (rec.latency_s is None or rec.latency_s > slo.latency_s):
        return False
    if slo.tpot_s is not None:
        tpot = request_tpot(rec)
        if tpot is not None and tpot > slo.tpot_s:
            return False
    return True


def _rate(x: float, wall: float | None) -> float | None:
    """Requests per second of wall time."""
    return x / wall if wall and wall > 0 else None


def _token_rate(tokens: int, wall: float | None) -> float | None:
    """Tokens per second of wall time (:func:`~specbench.results.speed_estimators.token_rate`)."""
    return speed_estimators.token_rate(tokens, wall) if wall and wall > 0 else None


def summarize_cell(
    records: Sequence[RequestRecord],
    wall_time_s: float | None,
    *,
    slo: SLO | None = None,
    counters: SpecCounters | None = None,
    cell_id: str | None = None,
    method: str | None = None,
    concurrency: int | None = None,
    request_rate: float | None = None,
    max_concurrency: int | None = None,
) -> ServingSummary:
    """Percentiles, throughput and goodput of one cell's records."""
    ok = [r for r in records if r.error is None]
    errors: dict[str, int] = defaultdict(int)
    for r in records:
        k = error_kind(r)
        if k is not None:
            errors[k] += 1
    out_tok = sum(r.num_output_tokens or (len(r.itl_s or []) + (r.ttft_s is not None)) for r in ok)
    prompt_tok = sum(r.prompt_tokens for r in ok)
    taus = [t for t in (spec_counters.counters_tau(r.spec) for r in ok) if t is not None]
    good = sum(meets_slo(r, slo) for r in records) if slo is not None else None
    tau_pooled = spec_counters.counters_tau(counters)
    return ServingSummary(
        cell_id=cell_id,
        method=method,
        concurrency=concurrency,
        request_rate=request_rate,
        max_concurrency=max_concurrency,
        num_requests=len(records),
        num_ok=len(ok),
        errors=dict(errors),
        wall_time_s=wall_time_s,
        ttft=dist(r.ttft_s for r in ok),
        tpot=dist(request_tpot(r) for r in ok),
        itl=dist(x for r in ok for x in (r.itl_s or [])),
        latency=dist(r.latency_s for r in ok),
        prompt_tokens=prompt_tok,
        output_tokens=out_tok,
        output_throughput=_token_rate(out_tok, wall_time_s),
        total_throughput=_token_rate(out_tok + prompt_tok, wall_time_s),
        request_throughput=_rate(len(ok), wall_time_s),
        goodput=(float(speed_estimators.goodput(good, wall_time_s))
                 if good is not None and wall_time_s and wall_time_s > 0 else None),
        goodput_fraction=(good / len(records)) if good is not None and records else None,
        tau_pooled=tau_pooled,
        tau_mean_per_request=float(np.mean(taus)) if taus else None,
    )


# ---------------------------------------------------------------------------
# speedup vs load (concurrency or request rate)

def cell_load(cell: Cell) -> Load:
    """The load a cell ran at: ``Rate(r)`` for a request-rate cell, else its concurrency."""
    return Rate(float(cell.request_rate)) if cell.request_rate is not None else cell.batch_size


def _load_order(load: Load) -> tuple[int, float]:
    """Concurrencies first, then rates, each ascending."""
    return (1, load.req_s) if isinstance(load, Rate) else (0, float(load))


def _tpot_units(records: Sequence[RequestRecord]) -> np.ndarray:
    """Rows of (decode time, tokens after the first) per successful request with a TPOT."""
    rows = [d for r in records if r.error is None and (d := _decode(r)) is not None]
    return np.asarray(rows, dtype=float).reshape(-1, 2)


def _rate_units(records: Sequence[RequestRecord]) -> np.ndarray:
    """Rows of (output tokens, latency) per successful request."""
    rows = [
        (float(r.num_output_tokens), float(r.latency_s))
        for r in records
        if r.error is None and r.latency_s is not None and r.latency_s > 0 and r.num_output_tokens > 0
    ]
    return np.asarray(rows, dtype=float).reshape(-1, 2)


def _speedup_ci(
    base: np.ndarray,
    meth: np.ndarray,
    metric: SpeedupMetric,
    *,
    resamples: int,
    seed: int,
) -> Estimate:
    """The speedup with a two-sample bootstrap interval (:func:`specbench.stats.bootstrap_two_sample`)."""
    ratio = speed_estimators.tpot_ratio if metric == "tpot" else speed_estimators.throughput_ratio

    def stat(b: np.ndarray, m: np.ndarray) -> np.ndarray:
        return ratio(m[..., 0].sum(-1), m[..., 1].sum(-1), b[..., 0].sum(-1), b[..., 1].sum(-1))

    return bootstrap_two_sample(base, meth, stat, resamples=resamples, seed=seed)


def speedup(
    baseline: Sequence[RequestRecord],
    method: Sequence[RequestRecord],
    metric: SpeedupMetric,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Estimate:
    """Speedup of ``method`` over ``baseline`` records (same concurrency) with a bootstrap 95% CI."""
    units = _tpot_units if metric == "tpot" else _rate_units
    return _speedup_ci(units(baseline), units(method), metric, resamples=resamples, seed=seed)


def speedups_vs_load(
    groups: Mapping[tuple[str, Load], Sequence[RequestRecord]],
    *,
    baseline: str = "baseline",
    metrics: Sequence[SpeedupMetric] = ("tpot", "throughput"),
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[Speedup]:
    """Speedups of every method over ``baseline`` at each load.

    ``groups`` maps ``(method label, load)`` to that cell group's records
    (repeats pooled) for one target, dataset and temperature (see
    :func:`group_records`); a load is a concurrency (``int``) or a
    :class:`Rate`. A method is only ever compared with the baseline at the
    same load; loads without a baseline are skipped. Concurrencies come
    first, then rates, each ascending.
    """
    out: list[Speedup] = []
    for (method, load), recs in sorted(groups.items(), key=lambda kv: (_load_order(kv[0][1]), kv[0][0])):
        if method == baseline or (baseline, load) not in groups:
            continue
        base = groups[(baseline, load)]
        where = {"request_rate": load.req_s} if isinstance(load, Rate) else {"concurrency": int(load)}
        for metric in metrics:
            est = speedup(base, recs, metric, resamples=resamples, seed=seed)
            units = _tpot_units if metric == "tpot" else _rate_units
            out.append(
                Speedup(
                    method=method,
                    metric=metric,
                    estimate=est,
                    n_method=int(units(recs).shape[0]),
                    n_baseline=int(units(base).shape[0]),
                    **where,
                )
            )
    return out


#: The name from before request-rate loads existed (same function).
speedups_vs_concurrency = speedups_vs_load


def group_records(
    records: Iterable[RequestRecord], cells: Iterable[Cell]
) -> dict[tuple[str, str, float], dict[tuple[str, Load], list[RequestRecord]]]:
    """``{(target, dataset, temperature): {(method, load): records}}``, repeats pooled.

    The load is the cell's concurrency (``int``) or ``Rate(request_rate)``.
    """
    by_cell = {c.cell_id: c for c in cells}
    out: dict[tuple[str, str, float], dict[tuple[str, Load], list[RequestRecord]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in records:
        c = by_cell.get(r.cell_id)
        if c is None:
            continue
        out[(c.target, c.dataset, c.temperature)][(c.method, cell_load(c))].append(r)
    return {k: dict(v) for k, v in out.items()}


# ---------------------------------------------------------------------------
# a cell against its baseline's and its reference method's cell (the report's serving table)


def comparison_cells(cells: Sequence[Cell], reference_of: Mapping[str, str],
                     output_throughput: Mapping[str, float | None]) -> dict[str, tuple[Cell | None, Cell | None]]:
    """Per server cell: the cell it is compared with as its baseline and as its reference method, each
    at the same target, dataset, temperature, load and repeat (None: none, or the cell itself).

    The reference is the target's reference method (``reference_of``: target → the headline's reference
    label) at the same K when it ran that K (``dflash-k3`` → ``eagle3-k3``), else its cell with the highest
    aggregate output tok/s (``output_throughput``: cell id → tok/s)."""
    peers: dict[tuple, list[Cell]] = defaultdict(list)
    for c in cells:
        peers[(c.target, c.dataset, c.temperature, cell_load(c), c.repeat)].append(c)
    out: dict[str, tuple[Cell | None, Cell | None]] = {}
    for c in cells:
        around = peers[(c.target, c.dataset, c.temperature, cell_load(c), c.repeat)]
        base = next((p for p in around if p.method_kind == "baseline"), None)
        ref_family = reference_of.get(c.target)
        refs = [p for p in around if ref_family is not None and p.method_family == ref_family]
        same_k = c.method.replace(c.method_family, ref_family or "", 1)
        ref = next((p for p in refs if p.method == same_k), None) or max(
            refs, key=lambda p: output_throughput.get(p.cell_id) or 0.0, default=None)
        out[c.cell_id] = (None if base is c else base, None if ref is c else ref)
    return out


def compare_cells(cell: ServingSummary, records: Sequence[RequestRecord], other: ServingSummary,
                  other_records: Sequence[RequestRecord]) -> ServingComparison:
    """``cell`` against ``other`` (its records beside each): the pooled TPOT ratio (other's over this one's,
    :func:`~specbench.results.speed_estimators.tpot_ratio`) and the ratio of aggregate output tok/s (Σ output
    tokens / wall time, this one's over the other's, :func:`~specbench.results.speed_estimators.throughput_ratio`)."""
    m, o = _tpot_units(records).sum(axis=0), _tpot_units(other_records).sum(axis=0)
    tpot = (float(speed_estimators.tpot_ratio(m[0], m[1], o[0], o[1]))
            if m[0] > 0 and m[1] > 0 and o[1] > 0 else None)
    walls = (cell.wall_time_s or 0.0, other.wall_time_s or 0.0)
    thr = (float(speed_estimators.throughput_ratio(cell.output_tokens, walls[0], other.output_tokens, walls[1]))
           if walls[0] > 0 and walls[1] > 0 and other.output_tokens > 0 else None)
    return ServingComparison(cell_id=other.cell_id or "", method=other.method or "", tpot_ratio=tpot,
                             throughput_ratio=thr)
