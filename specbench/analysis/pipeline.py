"""The analysis pipeline: a run's records in, its complete :class:`RunSummary` out (pure).

:func:`summarize_run` is the one place a summary is made: every group's metrics
(:func:`specbench.analysis.metrics.summarize_groups`, where an early-stopped group's
intervals are chosen too), the counter checks, the headline and K sweeps
(:mod:`specbench.analysis.method_comparison`), the serving part
(:func:`summarize_serving`, :mod:`specbench.analysis.serving_metrics`), the reference-simulator cross-check,
goodput under the suite's SLOs (:mod:`specbench.analysis.goodput`, :mod:`specbench.analysis.goodput_vs_load`),
acceptance along the output (:mod:`specbench.analysis.acceptance_along_output`),
and the inputs computed elsewhere (task scores, equivalence results) copied onto
their groups. Nothing edits the summary after it is returned. Reading the run
directory, scoring and the equivalence tests are the caller's
(:func:`specbench.api.analyze`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from pydantic import BaseModel

from specbench.analysis import cross_checks, metrics
from specbench.analysis.acceptance_along_output import acceptance_along_output
from specbench.analysis.apply_noise import with_speed_noise
from specbench.analysis.goodput import slo_seconds
from specbench.analysis.goodput_vs_load import goodput_curves
from specbench.analysis.headline_rounds import why_blocks_ended
from specbench.analysis.k_by_length import k_by_length
from specbench.analysis.method_comparison import HEADLINE_RULE, headline_ratios, k_sweeps
from specbench.analysis.serving_metrics import (
    SLO,
    compare_cells,
    comparison_cells,
    group_records,
    speedups_vs_load,
    summarize_cell,
)
from specbench.analysis.step_phases import step_shares
from specbench.analysis.workload_slices import Categories, category_matrix, workload_slices
from specbench.config.dataset_kinds import Scorer, kind_named
from specbench.config.plan import Cell
from specbench.config.suite import reference_method
from specbench.results import metric_catalog
from specbench.results.goodput_curve import GoodputSummary
from specbench.results.manifest import RunManifest
from specbench.results.noise_calibration import NoiseCalibration
from specbench.results.parts import (
    Equivalence,
    ServingCellRow,
    ServingComparison,
    ServingSpeedupRow,
    SummaryExtra,
)
from specbench.results.records import CellRecord, RequestRecord
from specbench.results.summary import GroupSummary, RunSummary
from specbench.scoring.apply import execution_note
from specbench.stats import Estimate

Scores = Mapping[tuple[str, str, int], dict]  # (cell id, prompt id, sample index) → metric → score


def summarize_run(
    manifest: RunManifest,
    cells: Sequence[Cell],
    cell_records: Sequence[CellRecord],
    requests: Sequence[RequestRecord],
    *,
    scores: Scores | None = None,
    scoring_notes: Sequence[str] = (),
    equivalence: Mapping[str, Equivalence] | None = None,
    prompt_references: Mapping[str, str | None] | None = None,
    prompt_categories: Categories | None = None,
    torn_lines: Sequence[str] = (),
    speed_noise: NoiseCalibration | None = None,
    speed_noise_note: str | None = None,
    speed_rounds: Sequence[RequestRecord] = (),
) -> RunSummary:
    """The run's summary (``summary.json``) from its manifest, the plan's cells and the raw records.

    ``scores``: task scores (:func:`specbench.scoring.apply.score_requests`) and ``scoring_notes``
    (why some were not scored); ``equivalence``: group id → its lossless checks
    (:func:`specbench.analysis.equivalence.equivalence_summaries`; a turn slice's under its slice id);
    ``prompt_references``:
    prompt id → reference answer (an early-stopped cell's accuracy); ``prompt_categories``: (dataset,
    prompt id) → category (the category slices and matrix); ``torn_lines``: the torn last
    lines of interrupted writes that reading the records dropped; ``speed_noise``: an A/A calibration
    whose between-run noise the speed intervals then include (:mod:`specbench.analysis.apply_noise`),
    ``speed_noise_note``: why one beside the run was not used; ``speed_rounds``: the headline's speed rounds on
    repeats of the prompts (``speed_only`` records, which only the headline's speed reads).
    """
    suite = manifest.suite
    if suite is None:
        raise ValueError(f"run {manifest.run_id}: its manifest holds no suite (written before suites were stored)")
    references = [r.model_dump(mode="json") for r in suite.references]
    executed = execution_note(scoring_notes)
    slo = slo_seconds(suite.slo) if suite.slo is not None else None
    groups = metrics.summarize_groups(
        cells, cell_records, requests, references, dict(scores or {}),
        prompt_references=prompt_references,
        equivalence=equivalence,
        scoring_notes={d.name: executed for d in suite.datasets
                       if executed and kind_named(d.kind).scorer is Scorer.EXECUTION},
        slo=slo,
    )
    latest = metrics.latest_cell_records(cell_records)
    unique = metrics.unique_requests(requests)
    greqs = metrics.requests_by_group(cells, latest, unique)
    reference_of = {t.name: ref for t in suite.targets if (ref := reference_method(suite, t)) is not None}
    cats = prompt_categories or {}
    slices = workload_slices(groups, greqs, cats, scores, equivalence)
    speed_reqs = greqs
    if speed_rounds:
        speed_reqs = {g: list(v) for g, v in greqs.items()}
        for g, v in metrics.requests_by_group(cells, latest, list(speed_rounds)).items():
            speed_reqs.setdefault(g, []).extend(v)
    headline = headline_ratios(groups, greqs, reference_of, references, speed_requests=speed_reqs)
    summary = RunSummary(
        run_id=manifest.run_id,
        suite_name=manifest.suite_name,
        groups=groups + slices,
        checks=cross_checks.counter_checks(groups),
        headline=headline,
        k_sweeps=k_sweeps(groups, greqs),
        extra=SummaryExtra(
            serving=summarize_serving({t.name for t in suite.targets if t.engine == "vllm-server"}, cells, unique,
                                      latest, reference_of, slo=slo),
            cross_check=cross_checks.cross_check(groups + [s for s in slices if s.slice and s.slice.turn is not None],
                                            suite.targets, draft_attention(manifest, cells)),
            category_matrix=category_matrix(groups, slices, greqs, cats, reference_of),
            scoring_notes=list(scoring_notes),
            torn_lines=list(torn_lines),
            zero_width=zero_width_intervals(groups),
            speed_noise_note=speed_noise_note,
            goodput=(GoodputSummary(slo=suite.slo, curves=goodput_curves(groups, greqs, ok_cells_by_group(
                cells, latest), slo)) if suite.slo is not None and slo is not None else None),
            acceptance_along_output=acceptance_along_output(
                groups, greqs, {t.name for t in suite.targets if t.model == "tiny"}),
            headline_blocks=why_blocks_ended(suite.headline, headline) if suite.headline is not None else None,
            k_by_length=k_by_length(groups, speed_reqs, HEADLINE_RULE),
            step_shares=step_shares(groups, ok_cells_by_group(cells, latest), {
                e.key: (e.describe.draft_weights_mib, e.describe.kv_cache_tokens)
                for e in manifest.engines if e.key and e.describe is not None}),
        ),
    )
    return summary if speed_noise is None else with_speed_noise(summary, speed_noise)


def ok_cells_by_group(cells: Sequence[Cell], latest: Mapping[str, CellRecord]) -> dict[str, list[CellRecord]]:
    """Each group's ok cells' latest records (what a group's wall time sums)."""
    out: dict[str, list[CellRecord]] = {}
    for c in cells:
        cr = latest.get(c.cell_id)
        if cr is not None and cr.status == "ok":
            out.setdefault(c.group_id, []).append(cr)
    return out


#: Below this many units an interval of zero width is flagged (unless exact by construction).
FEW_UNITS = 10


def zero_width_intervals(groups: Sequence[GroupSummary]) -> list[str]:
    """``"group (n=…): metric, metric, …"``: per group, every interval of zero width resting on fewer
    than :data:`FEW_UNITS` units whose method is not ``exact``. A bootstrap of equal values claims a
    certainty few units cannot give (shares get Wilson intervals; what is left is flagged in the report)."""
    out = []
    for g in groups:
        by_n: dict[int, list[str]] = {}
        for name, est in _estimates(g):
            if (est.value is not None and est.ci_low is not None and est.ci_low == est.ci_high
                    and 0 < est.n < FEW_UNITS and est.method not in ("exact", "bounds")):
                names = by_n.setdefault(est.n, [])
                if name not in names:
                    names.append(name)
        out += [f"{g.group_id} (n={n}): {', '.join(names)}" for n, names in sorted(by_n.items())]
    return out


def _estimates(g: GroupSummary) -> list[tuple[str, Estimate]]:
    out: list[tuple[str, Estimate]] = []
    for name in GroupSummary.model_fields:
        v = getattr(g, name)
        if isinstance(v, Estimate):
            out.append((metric_catalog.label(name), v))
        elif isinstance(v, list):
            out += [(f"{metric_catalog.label(name).removesuffix(' i')} {i + 1}", e)
                    for i, e in enumerate(v) if isinstance(e, Estimate)]
        elif name == "metrics":  # the catalogue's computed metrics, by name
            out += [(metric_catalog.label(k), e) for k, e in v.items()]
        elif isinstance(v, dict):
            out += [(f"{metric_catalog.label(name)} {k}", e) for k, e in v.items() if isinstance(e, Estimate)]
        elif isinstance(v, BaseModel):
            out += [(metric_catalog.label(f"{name}.{k}"), e) for k in type(v).model_fields
                    if isinstance(e := getattr(v, k), Estimate)]
    return out


def draft_attention(manifest: RunManifest, cells: Sequence[Cell]) -> dict[tuple[str, str], dict]:
    """(target, method) → how vLLM served its DFlash draft block vs how it was trained."""
    by_engine = {e.key: e.draft_attention.model_dump(mode="json", exclude_unset=True)
                 for e in manifest.engines if e.draft_attention is not None}
    return {(c.target, c.method): by_engine[c.engine_key] for c in cells if by_engine.get(c.engine_key)}


def summarize_serving(
    server_targets: Collection[str], cells: Sequence[Cell], unique: Sequence[RequestRecord],
    latest: Mapping[str, CellRecord], reference_of: Mapping[str, str] | None = None, *, slo: SLO | None = None,
) -> list[ServingCellRow | ServingSpeedupRow]:
    """The summary's serving part: speedup vs load (concurrency or request rate) per method, then per server
    cell its latency percentiles and throughput with its ratios to its baseline's and its reference method's
    cell at the same load (``unique``: :func:`~specbench.analysis.metrics.unique_requests`; ``latest``:
    :func:`~specbench.analysis.metrics.latest_cell_records`; ``reference_of``: target → the headline's
    reference method; ``slo``: the suite's objectives, each cell's goodput under them)."""
    if not server_targets:
        return []
    ok = [c for c in cells if c.target in server_targets and (cr := latest.get(c.cell_id)) and cr.status == "ok"]
    reqs = [r for r in unique if r.cell_id in {c.cell_id for c in ok}]
    rows: list[ServingCellRow | ServingSpeedupRow] = []
    for (target, dataset, temp), by_load in group_records(reqs, [c for c in cells if c.target in server_targets]).items():
        for sp in speedups_vs_load(by_load):
            rows.append(ServingSpeedupRow(target=target, dataset=dataset, temperature=temp,
                                          **sp.model_dump(mode="json")))
    records = {c.cell_id: [r for r in reqs if r.cell_id == c.cell_id] for c in ok}
    measured = {c.cell_id: summarize_cell(
        records[c.cell_id], latest[c.cell_id].wall_time_s, slo=slo, counters=latest[c.cell_id].counters,
        cell_id=c.cell_id,
        method=c.method, concurrency=c.batch_size if c.request_rate is None else None, request_rate=c.request_rate,
        max_concurrency=(c.batch_size or None) if c.request_rate is not None else None) for c in ok}
    against = comparison_cells(ok, reference_of or {}, {k: v.output_throughput for k, v in measured.items()})

    def vs(c: Cell, other: Cell | None) -> ServingComparison | None:
        if other is None:
            return None
        return compare_cells(measured[c.cell_id], records[c.cell_id], measured[other.cell_id], records[other.cell_id])

    for c in ok:
        base, ref = against[c.cell_id]
        rows.append(ServingCellRow(target=c.target, dataset=c.dataset, temperature=c.temperature,
                                   vs_baseline=vs(c, base), vs_reference=vs(c, ref),
                                   **measured[c.cell_id].model_dump(mode="json")))
    return rows
