"""Compare two runs group by group (pure).

Groups are matched by ``group_id`` (target/method/dataset/temperature/load).
For each metric both runs measured, the change ``d = new - base`` gets an
interval built from the two runs' own 95% intervals, assuming the runs are
independent:

    low  = d - sqrt((new - new_low)^2 + (base_high - base)^2)
    high = d + sqrt((new_high - new)^2 + (base - base_low)^2)

This is MOVER (method of variance estimates recovery, Zou & Donner 2008):
with symmetric normal intervals it is exactly ``d ± 1.96·sqrt(se_b² + se_n²)``
recovered from the half-widths (``se = half / 1.96``); with the skewed
bootstrap and Wilson intervals the runs report, it keeps each side's width.
It is a normal approximation and only as good as the two intervals: they
cover sampling noise over requests and prompts, not drift of the machine
between runs (a slower node moves tok/s and speedup beyond their intervals).

Speed (``output_tps``, ``speedup``) is different: its intervals cover noise
over requests within one run, not the machine's drift between runs (on a
shared 2-core runner two runs of one suite differ by 15-40% in tok/s with
intervals of ±1%). By default speed changes are therefore shown but not
tested (verdict "not tested"); ``speed_noise_floor_pct=P`` tests them with
each run's interval widened to at least ±P% of its value.

A change is *significant* when its interval excludes 0. With many metrics
and groups some 95% intervals would exclude 0 by chance alone, so by default
(``family_wise=True``) every interval is widened by the Bonferroni factor
``z(1 - α/2m) / z(1 - α/2)`` over the ``m`` comparisons that have intervals:
re-running an unchanged suite with another seed then flags nothing with
probability ≥ 95%.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from specbench.config.plan import load_tag
from specbench.results import metric_catalog as catalog
from specbench.results.fmt import fmt_est
from specbench.results.parts import HeadlineRow
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate

#: Metrics measured in time: their within-run intervals do not cover drift between runs.
SPEED_METRICS = catalog.speed_metrics()


def floor_interval(e: Estimate, pct: float) -> Estimate:
    """``e`` with each side of its interval at least ``pct`` % of its value wide."""
    if not pct or e.value is None or e.ci_low is None or e.ci_high is None:
        return e
    h = abs(e.value) * pct / 100
    return e.model_copy(update={"ci_low": min(e.ci_low, e.value - h), "ci_high": max(e.ci_high, e.value + h)})


metric_family = catalog.family


def estimates_of(g: GroupSummary, metrics: tuple[catalog.MetricSpec, ...]) -> dict[str, Estimate]:
    """A group's measured estimates of ``metrics`` by name (``per_position.<i>`` 1-based, ``accuracy.<key>``)."""
    out: dict[str, Estimate] = {}
    for m in metrics:
        held = catalog.held(g, m)
        if m.indexed == "position":
            named = [(f"{m.name}.{i + 1}", e) for i, e in enumerate(held or [])]
        elif m.indexed == "key":
            named = [(f"{m.name}.{k}", e) for k, e in sorted((held or {}).items())]
        elif isinstance(held, float):  # a bare statistic (latency percentiles): no interval
            named = [(m.name, Estimate(value=held, n=g.n_requests, method="none"))]
        else:
            named = [(m.name, held)]
        out.update((k, e) for k, e in named if isinstance(e, Estimate) and e.value is not None)
    return out


def metric_estimates(g: GroupSummary) -> dict[str, Estimate]:
    """A group's comparable (gated) metrics by name, from the catalogue."""
    return estimates_of(g, catalog.gate_metrics())


def _has_ci(e: Estimate | None) -> bool:
    return e is not None and e.value is not None and e.ci_low is not None and e.ci_high is not None


class MetricChange(BaseModel):
    """One metric of one group: base, new, and the change with its interval."""

    model_config = ConfigDict(extra="forbid")

    metric: str
    base: Estimate
    new: Estimate
    diff: float
    diff_low: float | None = None
    diff_high: float | None = None
    rel_change: float | None = None  # (new - base) / |base|
    significant: bool = False
    higher_is_better: bool = True
    tested: bool = True  # False: shown only (speed without a noise floor)

    @property
    def verdict(self) -> Literal["better", "worse", "no significant change", "no interval", "not tested"]:
        if not self.tested:
            return "not tested"
        if self.diff_low is None or self.diff_high is None:
            return "no interval"
        if not self.significant:
            return "no significant change"
        return "better" if (self.diff > 0) == self.higher_is_better else "worse"


def metric_change(metric: str, base: Estimate, new: Estimate, widen: float = 1.0) -> MetricChange | None:
    """The change of one metric; ``widen`` scales both runs' half-widths (multiplicity)."""
    if base.value is None or new.value is None:
        return None
    d = new.value - base.value
    rel = d / abs(base.value) if base.value != 0 else None
    hib = catalog.higher_is_better(metric)
    if not (_has_ci(base) and _has_ci(new)):
        return MetricChange(metric=metric, base=base, new=new, diff=d, rel_change=rel, higher_is_better=hib)
    assert base.ci_low is not None and base.ci_high is not None and new.ci_low is not None and new.ci_high is not None
    lo = d - widen * math.hypot(new.value - new.ci_low, base.ci_high - base.value)
    hi = d + widen * math.hypot(new.ci_high - new.value, base.value - base.ci_low)
    return MetricChange(metric=metric, base=base, new=new, diff=d, diff_low=lo, diff_high=hi, rel_change=rel,
                        significant=lo > 0 or hi < 0, higher_is_better=hib)


def bonferroni_widen(m: int, confidence: float = 0.95) -> float:
    """Factor turning the runs' 95% half-widths into ``confidence`` intervals, family-wise over ``m``.

    Normal approximation: ``z(1 - α/2m) / z(0.975)`` with ``α = 1 - confidence``.
    """
    nd = NormalDist()
    return nd.inv_cdf(1 - (1 - confidence) / (2 * max(1, m))) / nd.inv_cdf(0.975)


class GroupComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_id: str
    target: str
    method: str
    dataset: str
    temperature: float
    batch_size: int
    base_status: str
    new_status: str
    changes: list[MetricChange] = Field(default_factory=list)
    base_equivalence: str | None = None
    new_equivalence: str | None = None


def headline_key(r: HeadlineRow) -> str:
    """A headline row's name: ``target/method÷reference/dataset/T0/b1`` (``…/rate2`` for a request rate)."""
    return f"{r.target}/{r.method}÷{r.reference}/{r.dataset}/T{r.temperature:g}/{load_tag(r.batch_size, r.request_rate)}"


def headline_estimates(summary: RunSummary) -> dict[str, Estimate]:
    """Every headline ratio of a run by ``<headline_key>:<speedup_ratio|tau_ratio>``."""
    out: dict[str, Estimate] = {}
    for r in summary.headline:
        for metric in (m.name for m in catalog.gate_metrics("headline")):
            est = getattr(r, metric)
            if est.value is not None:
                out[f"{headline_key(r)}:{metric}"] = est
    return out


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_run_id: str
    new_run_id: str
    base_suite: str
    new_suite: str
    confidence: float = 0.95
    family_wise: bool = True
    n_comparisons: int = 0
    widen: float = 1.0
    speed_noise_floor_pct: float | None = None
    speed_calibrated: bool = False  # both runs' speed intervals include an A/A calibration's noise
    groups: list[GroupComparison] = Field(default_factory=list)
    only_in_base: list[str] = Field(default_factory=list)
    only_in_new: list[str] = Field(default_factory=list)
    ratios: list[MetricChange] = Field(default_factory=list)  # headline ratios (method ÷ reference), base → new

    def changes(self, significant_only: bool = False) -> list[tuple[GroupComparison, MetricChange]]:
        return [(g, c) for g in self.groups for c in g.changes if c.significant or not significant_only]


def equivalence_verdict(g: GroupSummary) -> str | None:
    """The worst verdict in ``g.equivalence`` (divergent > not shown equivalent > equivalent)."""
    if g.equivalence is None:
        return None
    verdicts = [t.verdict for _, t in g.equivalence.tests(g.temperature)]
    for v in ("divergent", "not shown equivalent", "equivalent"):
        if v in verdicts:
            return v
    return str(verdicts[0]) if verdicts else None


def compare_runs(base: RunSummary, new: RunSummary, *, confidence: float = 0.95,
                 family_wise: bool = True, speed_noise_floor_pct: float | None = None) -> Comparison:
    """Every metric of every group present in both runs, base → new.

    Speed metrics are tested only with ``speed_noise_floor_pct`` or when both runs' speed intervals
    include an A/A calibration's between-run noise (``extra.speed_noise``; see the module docstring).
    """
    calibrated = base.extra.speed_noise is not None and new.extra.speed_noise is not None

    def tested(metric: str) -> bool:
        return metric not in SPEED_METRICS or speed_noise_floor_pct is not None or calibrated

    def prepared(metric: str, e: Estimate) -> Estimate:
        if metric in SPEED_METRICS and speed_noise_floor_pct:
            return floor_interval(e, speed_noise_floor_pct)
        return e

    new_by_id = {g.group_id: g for g in new.groups}
    base_ids = {g.group_id for g in base.groups}
    pairs = [(b, new_by_id[b.group_id]) for b in base.groups if b.group_id in new_by_id]
    raw: list[tuple[GroupSummary, GroupSummary, dict[str, Estimate], dict[str, Estimate]]] = [
        (b, n, {k: prepared(k, e) for k, e in metric_estimates(b).items()},
         {k: prepared(k, e) for k, e in metric_estimates(n).items()}) for b, n in pairs
    ]
    m = sum(1 for _, _, mb, mn in raw for k in mb.keys() & mn.keys()
            if tested(k) and _has_ci(mb[k]) and _has_ci(mn[k]))
    widen = bonferroni_widen(m if family_wise else 1, confidence)
    groups = []
    for b, n, mb, mn in raw:
        changes = []
        for k in mb:
            if k not in mn or (c := metric_change(k, mb[k], mn[k], widen)) is None:
                continue
            if not tested(k):
                c = c.model_copy(update={"significant": False, "tested": False})
            changes.append(c)
        groups.append(GroupComparison(
            group_id=b.group_id, target=b.target, method=b.method, dataset=b.dataset, temperature=b.temperature,
            batch_size=b.batch_size, base_status=b.status, new_status=n.status, changes=changes,
            base_equivalence=equivalence_verdict(b), new_equivalence=equivalence_verdict(n),
        ))
    hb, hn = headline_estimates(base), headline_estimates(new)
    ratios = []
    for key in hb.keys() & hn.keys():
        ratio = key.rsplit(":", 1)[1]
        c = metric_change(ratio, prepared(ratio, hb[key]), prepared(ratio, hn[key]), widen)
        if c is not None:
            c = c.model_copy(update={"metric": key})
            if not tested(ratio):
                c = c.model_copy(update={"significant": False, "tested": False})
            ratios.append(c)
    return Comparison(
        ratios=sorted(ratios, key=lambda c: c.metric),
        base_run_id=base.run_id, new_run_id=new.run_id, base_suite=base.suite_name, new_suite=new.suite_name,
        confidence=confidence, family_wise=family_wise, n_comparisons=m, widen=widen,
        speed_noise_floor_pct=speed_noise_floor_pct, speed_calibrated=calibrated, groups=groups,
        only_in_base=[g.group_id for g in base.groups if g.group_id not in new_by_id],
        only_in_new=[g.group_id for g in new.groups if g.group_id not in base_ids],
    )


# --------------------------------------------------------------------------
# rendering


def _digits(metric: str, e: Estimate) -> int:
    """The catalogue's digits; a headline ratio's key (``<headline>:speedup_ratio``) by its ratio."""
    return catalog.digits(metric.rsplit(":", 1)[-1], e.value)


def fmt_change(c: MetricChange) -> str:
    """'-0.12 [-0.20, -0.04]'."""
    d = _digits(c.metric, c.base)
    interval = Estimate(value=c.diff, ci_low=c.diff_low, ci_high=c.diff_high)
    return fmt_est(interval, d, signed=True)


def fmt_rel(c: MetricChange) -> str:
    return "–" if c.rel_change is None else f"{100 * c.rel_change:+.1f}%"


def _row(g: GroupComparison, c: MetricChange) -> list[str]:
    d = _digits(c.metric, c.base)
    return [g.group_id, c.metric, fmt_est(c.base, d, n_default=None), fmt_est(c.new, d, n_default=None),
            fmt_change(c), fmt_rel(c), c.verdict]


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + [
        "| " + " | ".join(cell(x) for x in r) + " |" for r in rows]


HEADERS = ["Group", "Metric", "Base", "New", "Δ [interval]", "Δ %", "Verdict"]


def render_comparison_markdown(comp: Comparison) -> str:
    """The comparison as Markdown: significant changes first, everything else folded."""
    sig = comp.changes(significant_only=True)
    worse = [(g, c) for g, c in sig if c.verdict == "worse"]
    better = [(g, c) for g, c in sig if c.verdict == "better"]
    level = f"{100 * comp.confidence:g}%"
    adj = (f"family-wise over {comp.n_comparisons} comparisons (Bonferroni, intervals ×{comp.widen:.2f})"
           if comp.family_wise else "per comparison")
    lines = [f"# specbench compare · {comp.base_run_id} → {comp.new_run_id}", ""]
    if comp.base_suite != comp.new_suite:
        lines += [f"Warning: different suites ({comp.base_suite} vs {comp.new_suite}).", ""]
    lines += [f"{len(comp.groups)} groups in both runs; {len(sig)} significant changes ({len(worse)} worse, "
              f"{len(better)} better). Intervals of the differences are {level}, {adj}, from the two runs' "
              "intervals assuming independence.", ""]
    if comp.speed_noise_floor_pct is None and comp.speed_calibrated:
        lines += ["Speed is tested: both runs' speed intervals include the between-run noise of an A/A "
                  "calibration (`specbench calibrate`).", ""]
    elif comp.speed_noise_floor_pct is None:
        lines += ["Speed (output_tps, speedup) is shown but not tested: its intervals cover request noise within "
                  "a run, not machine drift between runs. `--speed-noise-floor-pct P` tests it with each run's "
                  "interval widened to at least ±P%; runs analysed with an A/A calibration "
                  "(`specbench calibrate`) are tested as they are.", ""]
    else:
        lines += [f"Speed intervals widened to at least ±{comp.speed_noise_floor_pct:g}% of each run's value "
                  "(machine drift between runs).", ""]
    if sig:
        lines += ["## Significant changes", ""] + _table(HEADERS, [_row(g, c) for g, c in worse + better]) + [""]
    status = [[g.group_id, g.base_status, g.new_status] for g in comp.groups if g.base_status != g.new_status]
    if status:
        lines += ["## Status changes", ""] + _table(["Group", "Base", "New"], status) + [""]
    eq = [[g.group_id, g.base_equivalence or "–", g.new_equivalence or "–"] for g in comp.groups
          if g.base_equivalence != g.new_equivalence]
    if eq:
        lines += ["## Equivalence changes", ""] + _table(["Group", "Base", "New"], eq) + [""]
    if comp.only_in_base or comp.only_in_new:
        lines += ["## Unmatched groups", ""]
        lines += [f"- only in base: {gid}" for gid in comp.only_in_base]
        lines += [f"- only in new: {gid}" for gid in comp.only_in_new] + [""]
    if comp.ratios:
        lines += ["## Ratios against the reference method", "",
                  "The headline's paired ratios (method ÷ reference at each one's best K), base → new:", ""]
        lines += _table(["Ratio", "Base", "New", "Δ [interval]", "Verdict"],
                        [[c.metric, fmt_est(c.base, 2, n_default=None), fmt_est(c.new, 2, n_default=None),
                          fmt_change(c), c.verdict] for c in comp.ratios]) + [""]
    all_rows = [_row(g, c) for g, c in comp.changes()]
    if all_rows:
        lines += ["<details>", f"<summary>All {len(all_rows)} metric changes</summary>", ""]
        lines += _table(HEADERS, all_rows) + ["", "</details>", ""]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
