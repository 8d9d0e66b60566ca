"""Running a cell under a stop rule: which prompts, in which order, when to check,
what to record (glue between records and :mod:`specbench.analysis.sequential`).

The prompts run in :func:`~specbench.analysis.sequential.seeded_order`; the engine runs
them in blocks ending at :func:`~specbench.analysis.sequential.check_points`, and after
each block :meth:`CellStopper.check` decides. A metric the cell cannot
measure (τ or speedup of the baseline itself, accuracy without an in-process
scorer) does not stop it: such a cell runs its first ``max_prompts`` prompts
(all by default), so that every paired cell finds its prompts there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from specbench.analysis import sequential as sq
from specbench.config.dataset_kinds import KINDS, Scorer, names_where
from specbench.config.stop_rule import StopRecord, StopRule
from specbench.results.records import RequestRecord
from specbench.results.requests import PreparedPrompt
from specbench.scoring.gsm8k import reference_answer, score_gsm8k
from specbench.stats import Estimate

#: Kinds whose accuracy a stop rule can follow: scored in-process (HumanEval's execution needs the sandbox).
ACCURACY_SCORERS = tuple(names_where(lambda k: k.scorer is Scorer.ANSWER))


def measurable(rule: StopRule, *, speculative: bool, has_baseline: bool, dataset_kind: str | None) -> str | None:
    """Why a cell cannot stop on ``rule`` (None when it can)."""
    if rule.metric == "tau" and not speculative:
        return "no τ without speculation"
    if rule.metric == "speedup" and (not speculative or not has_baseline):
        return "speedup needs a speculative cell and its baseline's records"
    kind = KINDS.get(dataset_kind or "")
    if rule.metric == "accuracy" and (kind is None or kind.scorer is not Scorer.ANSWER):
        return f"accuracy is scored in-process for {', '.join(ACCURACY_SCORERS)} only"
    return None


def metric_units(metric: str, records: Sequence[RequestRecord], paired: Sequence[RequestRecord] | None = None,
                 references: Mapping[str, str | None] | None = None) -> dict:
    """``{prompt_id: row}`` of a cell's records for ``metric`` (accuracy: GSM8k strict, scored here)."""
    if metric == "accuracy":
        refs = references or {}
        scores = {}
        for r in records:
            ref = refs.get(r.prompt_id)
            if r.error is None and ref:
                scores[(r.cell_id, r.prompt_id, r.sample_index)] = {
                    "strict": score_gsm8k(r.output_text, reference_answer(ref))["strict"]}
        return sq.prompt_units("accuracy", records, scores=scores, score_metric="strict")
    return sq.prompt_units(metric, records, baseline=paired)  # type: ignore[arg-type]


def stopped_interval(stop: StopRecord, records: Sequence[RequestRecord], paired: Sequence[RequestRecord] | None,
                     references: Mapping[str, str | None] | None = None, metric: str | None = None) -> Estimate | None:
    """A stopped cell's confidence sequence for ``metric`` (default: the rule's) at the prompts
    it used, recomputed from its records (for the rule's metric: what the stop record says).

    Every metric of a cell that stopped at a data-dependent n gets one: a fixed-n interval
    at that n would claim more than it covers. None when the cell cannot measure it.
    """
    metric = metric or stop.rule.metric
    if metric == stop.rule.metric and stop.estimate is None:
        return None
    if metric == "speedup" and not paired:
        return None
    order = sq.seeded_order(sorted({r.prompt_id for r in records}), stop.order_seed)
    try:
        rows = sq.ordered_units(metric_units(metric, records, paired, references), order)
    except ValueError:
        return None
    if len(rows) == 0:
        return None
    est, lo, hi = sq.confidence_sequence(metric, rows, alpha=stop.rule.alpha,  # type: ignore[arg-type]
                                         planned_n=stop.rule.planned(stop.n_available))
    if not math.isfinite(est):
        return None
    return Estimate(value=est, ci_low=lo if math.isfinite(lo) else None, ci_high=hi if math.isfinite(hi) else None,
                    n=len(rows), method="betting-cs" if metric == "accuracy" else "asymptotic-cs")


class CellStopper:
    """The order, the blocks and the decisions of one cell with a stop rule."""

    def __init__(
        self,
        rule: StopRule,
        prompts: Sequence[PreparedPrompt],
        *,
        seed: int,
        speculative: bool,
        paired: Sequence[RequestRecord] | None = None,
        dataset_kind: str | None = None,
        earlier: Sequence[RequestRecord] = (),
    ):
        self.rule = rule
        self.seed = seed
        self.order = sq.seeded_order([p.prompt_id for p in prompts], seed)
        by_id = {p.prompt_id: p for p in prompts}
        self.prompts = [by_id[i] for i in self.order]
        self.paired = list(paired) if paired is not None else None
        if self.paired is not None:
            # Paired: never beyond the prompts the baseline ran (they are a prefix of the same order).
            have = {r.prompt_id for r in self.paired if r.error is None}
            n = next((i for i, pid in enumerate(self.order) if pid not in have), len(self.order))
            self.order, self.prompts = self.order[:n], self.prompts[:n]
        self.unmeasurable = measurable(rule, speculative=speculative, has_baseline=self.paired is not None,
                                       dataset_kind=dataset_kind)
        self.dataset_kind = dataset_kind
        self.references = {p.prompt_id: p.reference for p in prompts}
        self.records: list[RequestRecord] = list(earlier)
        self.checks: list[tuple[int, float, float]] = []
        self.decision: sq.StopDecision | None = None

    @property
    def n_available(self) -> int:
        return len(self.order)

    def blocks(self) -> list[tuple[int, int]]:
        """(start, end) of each block of the order; a check follows every block."""
        ends = sq.check_points(self.rule, self.n_available)
        if self.unmeasurable is not None:
            ends = ends[-1:]  # nothing to check: one block up to max_prompts
        return [(a, b) for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def _units(self) -> dict:
        return metric_units(self.rule.metric, self.records, self.paired, self.references)

    def check(self, n: int) -> bool:
        """After the block ending at ``n`` prompts: stop now?"""
        if self.unmeasurable is not None:
            self.decision = sq.StopDecision(True, "max_prompts" if n < len(self.order) else "exhausted",
                                            float("nan"), float("nan"), float("nan"), n, float("nan"), float("nan"))
            return True
        rows = sq.ordered_units(self._units(), self.order[:n])
        d = sq.should_stop(self.rule, rows, self.n_available)
        self.decision = d
        self.checks.append((n, d.lo, d.hi))
        return d.stop

    def record(self) -> StopRecord:
        assert self.decision is not None
        rec = sq.stop_record(self.rule, self.decision, order_seed=self.seed, n_available=self.n_available,
                             checks=self.checks)
        if self.unmeasurable is not None:
            rec.reason = f"{rec.reason} ({self.unmeasurable})"
        return rec
