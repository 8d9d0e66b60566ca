"""The regression gate for CI: a new run against a baseline (:mod:`specbench.regression.gate_baseline`),
under rules per metric (:mod:`specbench.regression.gate_rules`).

A metric regresses only when its change is BOTH beyond the threshold (a
relative drop above ``max_drop_pct`` of the baseline value, or an absolute
drop above ``max_drop_abs``) AND significant in the bad direction: the
difference interval (MOVER, see :mod:`specbench.regression.run_diff`) lies entirely on
the bad side of 0. Equivalence fails on a ``divergent`` verdict (and, with
``require: equivalent``, on ``not shown equivalent`` too).

Exit codes: 0 pass, 1 regression, 2 bad input or config (:class:`GateConfigError`,
or no group in common with the baseline), 3 nothing measured (no groups, or
every group failed/skipped). The verdict in Markdown: :mod:`specbench.report.gate_verdict`.
"""

from __future__ import annotations

import math
from fnmatch import fnmatchcase
from typing import Literal, NamedTuple

from pydantic import Field

from specbench.regression.calibrate_noise import detectable_drop_pct
from specbench.regression.gate_baseline import ExpectedValues
from specbench.regression.gate_rules import GateRules, LimitRule, StrictGateModel, ThresholdRule
from specbench.regression.run_diff import (
    SPEED_METRICS,
    MetricChange,
    bonferroni_widen,
    equivalence_verdict,
    floor_interval,
    headline_key,
    metric_change,
    metric_estimates,
    metric_family,
)
from specbench.results import metric_catalog as catalog
from specbench.results.fmt import fmt_est
from specbench.results.noise_calibration import NoiseCalibration
from specbench.results.parts import HeadlineRow
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate, with_between_run


class GateCheck(StrictGateModel):
    group_id: str
    metric: str
    rule: str
    passed: bool
    message: str
    change: MetricChange | None = None
    first_run: str | None = None  # history gate: the run where the worse level began


class GateResult(StrictGateModel):
    exit_code: int
    status: Literal["pass", "regression", "bad input", "nothing measured"]
    baseline: str
    confidence: float
    n_comparisons: int = 0
    widen: float = 1.0
    checks: list[GateCheck] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    # what the speed floors let this gate see: the drop it catches in 90 % of reruns, per speed metric
    notes: list[str] = Field(default_factory=list)

    @property
    def failures(self) -> list[GateCheck]:
        return [c for c in self.checks if not c.passed]


def _measured(g: GroupSummary) -> bool:
    return g.status in ("ok", "partial")


def _regressed(c: MetricChange, rule: ThresholdRule, tol_pct: float | None, tol_abs: float | None) -> tuple[bool, str]:
    """(failed, limit text): beyond the threshold AND significant in the bad direction."""
    sign = 1.0 if c.higher_is_better else -1.0
    drop = -sign * c.diff  # > 0: worse
    pct, ab = (tol_pct, tol_abs) if (tol_pct is not None or tol_abs is not None) else (rule.max_drop_pct,
                                                                                        rule.max_drop_abs)
    if pct is not None:
        base = abs(c.base.value or 0.0)
        drop_pct = 100 * drop / base if base > 0 else (math.inf if drop > 0 else 0.0)
        beyond, limit = drop_pct > pct, f"max drop {pct:g}%"
    else:
        beyond, limit = drop > (ab or 0.0), f"max drop {ab:g}"
    bad_side = c.diff_high is not None and c.diff_low is not None and (
        c.diff_high < 0 if c.higher_is_better else c.diff_low > 0)
    return beyond and bad_side, limit


def _describe(gid: str, c: MetricChange, limit: str, failed: bool) -> str:
    rel = f"{100 * c.rel_change:+.1f}%" if c.rel_change is not None else "n/a"
    diff = fmt_est(Estimate(value=c.diff, ci_low=c.diff_low, ci_high=c.diff_high), 3, signed=True)
    sig = "significant" if c.significant else "not significant"
    return (f"{'FAIL' if failed else 'ok'} {c.metric} on {gid}: {fmt_est(c.base, 3)} → {fmt_est(c.new, 3)} "
            f"({rel}; {limit}); Δ {diff}, {sig}")


NOT_GATED = "speed not gated: no noise estimate"


def speed_floor(name: str, rule: ThresholdRule, single_run: bool, noise: NoiseCalibration | None) -> float | None:
    """The noise floor (percent) a speed metric's intervals get, or None when it cannot be gated.

    An explicit ``noise_floor_pct`` in the rule wins; else an A/A calibration's floor
    (:mod:`specbench.regression.calibrate_noise`). Against a single baseline run with neither, speed is
    not gated: the within-run intervals miss run-to-run drift and would fail identical code.
    Against expected values (a history window's median with its MAD band, or a file's
    tolerances) the baseline's interval already holds the run-to-run spread: floor 0.
    Metrics that are not speed keep the rule's floor.
    """
    if metric_family(name) not in SPEED_METRICS or rule.noise_floor_pct > 0:
        return rule.noise_floor_pct
    cal = noise.floor_pct(name) if noise is not None else None
    if cal is not None:
        return cal
    return None if single_run else 0.0



class _Comparison(NamedTuple):
    """One baseline metric against the new run's, under its drop rule (before the intervals are widened)."""

    group_id: str
    metric: str
    rule: ThresholdRule
    floor: float  # noise floor, percent
    base: Estimate
    new: Estimate
    tol_pct: float | None  # an expected value's own tolerance, over the rule's
    tol_abs: float | None


#: A gated group's baseline metrics: {metric: (estimate, tolerance_pct, tolerance_abs)}.
_BaseMetrics = dict[str, tuple[Estimate, float | None, float | None]]


def evaluate_gate(new: RunSummary, baseline: RunSummary | ExpectedValues, rules: GateRules | None = None,
                  noise: NoiseCalibration | None = None) -> GateResult:
    """Check ``new`` against ``baseline`` under ``rules`` (defaults when None); ``noise``: an A/A
    calibration of the speed metrics' run-to-run noise on this hardware class (see :func:`speed_floor`)."""
    rules = rules or GateRules()
    kind = f"run {baseline.run_id}" if isinstance(baseline, RunSummary) else "expected values"
    result = GateResult(exit_code=0, status="pass", baseline=kind, confidence=rules.confidence)
    gated_new = {g.group_id: g for g in new.groups if rules.gated(g.group_id)}
    if not any(_measured(g) for g in gated_new.values()):
        result.exit_code, result.status = 3, "nothing measured"
        result.errors.append("the new run measured nothing: " + (
            "no groups" if not gated_new else "every gated group failed or was skipped"))
        return result
    base = _baseline_metrics(baseline, rules)
    if base and not base.keys() & gated_new.keys():
        result.exit_code, result.status = 2, "bad input"
        result.errors.append("no group of the new run is in the baseline: wrong baseline or suite?")
        return result
    todo = _comparisons(result, rules, base, gated_new, isinstance(baseline, RunSummary), noise)
    m = sum(1 for c in todo if c.base.ci_low is not None and c.new.ci_low is not None)
    result.n_comparisons = m
    result.widen = bonferroni_widen(m if rules.family_wise else 1, rules.confidence)
    # expected values (a history window's median and MAD band) hold the run-to-run spread already
    base_calibrated = not isinstance(baseline, RunSummary) or baseline.extra.speed_noise is not None
    _metric_checks(result, todo, base_calibrated, new.extra.speed_noise is not None)
    _equivalence_checks(result, gated_new, rules)
    _limit_checks(result, gated_new, rules)
    result.notes += _detectable(todo, result.widen)
    _ratio_checks(result, new, rules)
    if result.failures:
        result.exit_code, result.status = 1, "regression"
    return result


def _baseline_metrics(baseline: RunSummary | ExpectedValues, rules: GateRules) -> dict[str, _BaseMetrics]:
    """Per gated baseline group (measured, for a run), its metrics with their tolerances."""
    base: dict[str, _BaseMetrics] = {}
    if isinstance(baseline, RunSummary):
        for g in baseline.groups:
            if rules.gated(g.group_id) and _measured(g):
                base[g.group_id] = {k: (e, None, None) for k, e in metric_estimates(g).items()}
    else:
        for gid, expected in baseline.groups.items():
            if rules.gated(gid):
                base[gid] = {k: (m.estimate(), m.tolerance_pct, m.tolerance_abs) for k, m in expected.items()}
    return base


def _comparisons(result: GateResult, rules: GateRules, base: dict[str, _BaseMetrics],
                 gated_new: dict[str, GroupSummary], single_run: bool,
                 noise: NoiseCalibration | None) -> list[_Comparison]:
    """Every baseline metric under a drop rule that the new run measured (what is missing: a failed check or a
    warning, per ``rules.missing``; speed that cannot be gated: one warning)."""
    todo: list[_Comparison] = []
    not_gated: list[str] = []
    for gid, base_metrics in base.items():
        ng = gated_new.get(gid)
        if ng is None or not _measured(ng):
            why = "missing from the new run" if ng is None else f"{ng.status} in the new run"
            _missing(result, rules, gid, "group", f"{gid}: measured in the baseline but {why}")
            continue
        ruleset, now = rules.for_group(gid), metric_estimates(ng)
        for name, (b_est, tol_pct, tol_abs) in base_metrics.items():
            rule = ruleset.rule(metric_family(name))
            if rule is None or isinstance(rule, LimitRule):
                continue
            if name not in now:
                _missing(result, rules, gid, name, f"{name} on {gid}: in the baseline but not measured now")
                continue
            floor = speed_floor(name, rule, single_run, noise)
            if floor is None:
                not_gated.append(f"{name} on {gid}")
                continue
            todo.append(_Comparison(gid, name, rule, floor, b_est, now[name], tol_pct, tol_abs))
    if not_gated:
        result.warnings.append(f"{NOT_GATED} ({len(not_gated)} comparisons, e.g. {not_gated[0]}): calibrate one "
                               "on identical-code runs (specbench calibrate RUN RUN ..., then --noise FILE or runs "
                               "analysed beside it) or give the rule a noise_floor_pct")
    return todo


def _metric_checks(result: GateResult, todo: list[_Comparison], base_calibrated: bool, new_calibrated: bool) -> None:
    """One check per comparison: its difference interval (widened for the family) against its drop rule."""
    for gid, name, rule, floor, b_est, n_est, tol_pct, tol_abs in todo:
        if metric_family(name) in SPEED_METRICS and not rule.noise_floor_pct and floor:
            # An A/A calibration's noise, added as the analysis adds it (in quadrature), to each run whose
            # interval does not include it already; an explicit noise_floor_pct is a floor (at least ±P %).
            b_est = b_est if base_calibrated else with_between_run(b_est, floor)
            n_est = n_est if new_calibrated else with_between_run(n_est, floor)
            c = metric_change(name, b_est, n_est, result.widen)
        else:
            c = metric_change(name, floor_interval(b_est, floor), floor_interval(n_est, floor), result.widen)
        if c is None:
            continue
        failed, limit = _regressed(c, rule, tol_pct, tol_abs)
        if floor:
            limit += f", noise floor ±{floor:g}%"
        result.checks.append(GateCheck(group_id=gid, metric=name, rule=f"{metric_family(name)}: {limit}",
                                       passed=not failed, message=_describe(gid, c, limit, failed), change=c))


def _equivalence_checks(result: GateResult, gated_new: dict[str, GroupSummary], rules: GateRules) -> None:
    """The lossless verdict of every gated group whose rules require one (a lossy group diverges by
    construction: its report says why, the gate leaves it out)."""
    eq_groups = {gid: g for gid, g in gated_new.items()
                 if rules.for_group(gid).equivalence is not None and equivalence_verdict(g) is not None and _measured(g)
                 and g.lossy is None}
    # Sampled tests are p-values at their own α each: family-wise, a divergence counts only at α / m over
    # the m sampled tests gated (Bonferroni, as the metric comparisons are), so that an unchanged suite
    # with many sampled groups still passes >= `confidence` of the time. Greedy divergence is not a test.
    sampled = {gid: _sampled_p(g) for gid, g in eq_groups.items()}
    m_sampled = sum(v is not None for v in sampled.values()) if rules.family_wise else 1
    for gid, g in eq_groups.items():
        eq_rule = rules.for_group(gid).equivalence
        assert eq_rule is not None
        verdict = equivalence_verdict(g)
        note = ""
        sp = sampled[gid]
        if verdict == "divergent" and m_sampled > 1 and sp is not None and _only_sampled_divergent(g):
            p, alpha = sp
            if p > alpha / m_sampled:
                verdict = "not shown equivalent"
                note = (f"; divergent at α={alpha:g} alone (p={p:.3g}), not at α/{m_sampled}={alpha / m_sampled:.2g} "
                        f"over the {m_sampled} sampled tests gated (family-wise)")
        bad = {"divergent"} | ({"not shown equivalent"} if eq_rule.require == "equivalent" else set())
        failed = verdict in bad
        result.checks.append(GateCheck(
            group_id=gid, metric="equivalence", rule=f"equivalence: {eq_rule.require.replace('_', ' ')}",
            passed=not failed, message=f"{'FAIL' if failed else 'ok'} equivalence on {gid}: {verdict} "
            f"(required: {eq_rule.require.replace('_', ' ')}){note}"))



def _sampled_p(g: GroupSummary) -> tuple[float, float] | None:
    """(p-value, α) of the group's sampled-equivalence test, when it has one."""
    t = g.equivalence.sampled if g.equivalence is not None else None
    if t is None or t.pvalue is None or t.alpha is None or t.n_tokens == 0:  # nothing scored: no test
        return None
    return t.pvalue, t.alpha


def _only_sampled_divergent(g: GroupSummary) -> bool:
    """Whether the sampled test is the group's only divergent one."""
    assert g.equivalence is not None
    return [name for name, t in g.equivalence.tests(g.temperature) if t.verdict == "divergent"] == ["sampled"]


def _limit_checks(result: GateResult, groups: dict[str, GroupSummary], rules: GateRules) -> None:
    """Every bound (:class:`LimitRule`) on the new run's own values, per gated group that measured the metric."""
    checked: set[str] = set()
    named: set[str] = set()
    for gid, g in groups.items():
        if not _measured(g):
            continue
        limits = {k: v for k, v in rules.for_group(gid).given.items() if isinstance(v, LimitRule)}
        named |= limits.keys()
        for name, est in metric_estimates(g).items():
            rule = limits.get(metric_family(name))
            if rule is None or est.value is None:
                continue
            checked.add(metric_family(name))
            failed = not rule.holds(est.value)
            result.checks.append(GateCheck(
                group_id=gid, metric=name, rule=f"{metric_family(name)}: {rule.describe()}", passed=not failed,
                message=f"{'FAIL' if failed else 'ok'} {name} on {gid}: {fmt_est(est, 3)} ({rule.describe()})"))
    for name in sorted(named - checked):
        result.warnings.append(f"rule '{name}' bounds a value no gated group of the new run measured")


def _detectable(todo: list[_Comparison], widen: float) -> list[str]:
    """Per higher-is-better speed metric gated with a noise floor (speedup, tok/s: a regression is a drop,
    as the formula assumes): the smallest drop caught in 90 % of reruns at this gate's multiplicity
    (:func:`specbench.regression.calibrate_noise.detectable_drop_pct`)."""
    floors: dict[str, set[float]] = {}
    for _gid, name, _rule, floor, *_ in todo:
        if metric_family(name) in SPEED_METRICS and floor and catalog.higher_is_better(name):
            floors.setdefault(name, set()).add(floor)
    notes = []
    for name, fs in sorted(floors.items()):
        worst = max(fs)
        drop = detectable_drop_pct(worst, widen)
        seen = "no drop" if drop is None else f"a drop of about {drop:.0f} % or more"
        notes.append(f"{name}: with a noise floor of ±{worst:.1f}% and intervals ×{widen:.2f}, {seen} is caught in "
                     "90 % of reruns; smaller ones mostly pass")
    return notes


def _where(r: HeadlineRow) -> str:
    """``target/dataset/T<t>/<load>`` of a headline row (what a ratio rule's ``where`` glob sees)."""
    _, _, dataset_t_load = headline_key(r).split("/", 2)
    return f"{r.target}/{dataset_t_load}"


def _ratio_checks(result: GateResult, new: RunSummary, rules: GateRules) -> None:
    """Each ratio rule against every matching headline row of the new run (see :class:`RatioRule`)."""
    for rule in rules.ratios:
        hits = [r for r in new.headline if fnmatchcase(r.method, rule.method) and fnmatchcase(r.reference, rule.over)
                and fnmatchcase(_where(r), rule.where)]
        if not hits:
            # A claim about methods (or a target) this run does not compare is not a regression:
            # the rule does not apply, and the gate says so.
            result.warnings.append(f"ratio rule '{rule.describe()}' does not apply: no such row in the headline")
            continue
        for r in hits:
            est: Estimate = getattr(r, rule.metric)
            lo, hi = est.ci_low, est.ci_high
            if est.value is None:
                failed, how = True, "not measured"
            elif rule.require == "above":
                failed, how = lo is None or lo < rule.min, "interval not entirely at or above the floor"
            else:
                failed, how = hi is not None and hi < rule.min, "interval entirely below the floor"
            msg = f"{'FAIL' if failed else 'ok'} {headline_key(r)}: {rule.metric} {fmt_est(est, 2)}" + (
                f" ({how})" if failed else "")
            result.checks.append(GateCheck(group_id=headline_key(r), metric=rule.metric, rule=rule.describe(),
                                           passed=not failed, message=msg))


def _missing(result: GateResult, rules: GateRules, gid: str, what: str, message: str) -> None:
    if rules.missing == "fail":
        result.checks.append(GateCheck(group_id=gid, metric=what, rule="missing: fail", passed=False,
                                       message="FAIL " + message))
    else:
        result.warnings.append(message)
