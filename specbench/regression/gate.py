"""Regression gate for CI: a new run against a baseline, with rules per metric.

Baseline: either a stored run (a run directory holding ``summary.json``, or
that file) or a small JSON file of expected values::

    {"groups": {"<group_id>": {
        "tau":      {"value": 2.5, "ci_low": 2.4, "ci_high": 2.6, "tolerance_pct": 3},
        "speedup":  {"value": 1.8},
        "accuracy.exact_match": {"value": 0.78, "ci_low": 0.71, "ci_high": 0.85, "tolerance_abs": 0.02}}}}

Metric names: ``tau``, ``tau_per_request``, ``per_position.<i>`` (1-based),
``output_tps``, ``speedup``, ``greedy_match``, ``accuracy.<key>``. An
expected value without an interval is taken as exact (only the new run's
interval counts); ``tolerance_pct``/``tolerance_abs`` replace the rule's
threshold for that metric. ``expected_from_run`` writes this format from a run.

Rules (YAML, ``--rules``; see ``gates.example.yaml``)::

    confidence: 0.95        # of the difference intervals
    family_wise: true       # Bonferroni over every gated comparison
    missing: fail           # baseline group/metric absent or not measured in the new run: fail | warn
    groups: ["*"]           # fnmatch globs over group ids to gate; a last segment `category=coding,…`
                            # selects slices (specbench.results.slices.group_matches)
    rules:                  # merged over the defaults; `name: null` turns a default off
      tau: {max_drop_pct: 3}
      speedup: {max_drop_pct: 5}             # noise_floor_pct: 3 widens each run's interval to >= ±3%
      accuracy: {max_drop_pct: 0}
      degenerate_share: {max: 0.2}           # a bound on the new run's own value (max / min), not a drop
      equivalence: {require: not_divergent}   # or: equivalent
    overrides:
      - groups: ["*/ngram/*"]
        rules: {speedup: {max_drop_pct: 10}}

A metric regresses only when its change is BOTH beyond the threshold (a
relative drop above ``max_drop_pct`` of the baseline value, or an absolute
drop above ``max_drop_abs``) AND significant in the bad direction: the
difference interval (MOVER, see :mod:`specbench.regression.run_diff`) lies entirely on
the bad side of 0. Equivalence fails on a ``divergent`` verdict (and, with
``require: equivalent``, on ``not shown equivalent`` too).

Exit codes: 0 pass, 1 regression, 2 bad input or config (:class:`GateConfigError`,
or no group in common with the baseline), 3 nothing measured (no groups, or
every group failed/skipped).
"""

from __future__ import annotations

import json
import math
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specbench.errors import SpecbenchError
from specbench.regression.calibrate_noise import detectable_drop_pct
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
from specbench.results import rundir
from specbench.results.fmt import fmt_est
from specbench.results.migrations import SchemaError
from specbench.results.noise_calibration import NoiseCalibration
from specbench.results.parts import HeadlineRow
from specbench.results.slices import group_matches, parse_selector
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate, with_between_run


class GateConfigError(SpecbenchError):
    """Malformed rules or baseline (exit code 2)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ThresholdRule(_Strict):
    """Largest allowed drop: relative (percent of the baseline value) or absolute."""

    max_drop_pct: float | None = Field(None, ge=0)
    max_drop_abs: float | None = Field(None, ge=0)
    #: Each run's interval half-width is at least this percent of its value: run-to-run drift
    #: (machine load, clocks) that the within-run intervals over requests do not see.
    noise_floor_pct: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _one(self) -> ThresholdRule:
        if (self.max_drop_pct is None) == (self.max_drop_abs is None):
            raise ValueError("give exactly one of max_drop_pct, max_drop_abs")
        return self

    def describe(self) -> str:
        return f"max drop {self.max_drop_pct:g}%" if self.max_drop_pct is not None else f"max drop {self.max_drop_abs:g}"


class LimitRule(_Strict):
    """A bound on the new run's own value of a metric, whatever the baseline says: ``degenerate_share:
    {max: 0.2}`` fails every gated group with more than a fifth of its outputs degenerate; ``min`` is a
    floor. Judged on the value (what this run's numbers rest on), not on its interval."""

    max: float | None = None
    min: float | None = None

    @model_validator(mode="after")
    def _some(self) -> LimitRule:
        if self.max is None and self.min is None:
            raise ValueError("give max, min or both")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError("need min <= max")
        return self

    def describe(self) -> str:
        return " and ".join(f"{word} {v:g}" for word, v in (("at least", self.min), ("at most", self.max))
                            if v is not None)

    def holds(self, value: float) -> bool:
        return (self.max is None or value <= self.max) and (self.min is None or value >= self.min)


MetricRule = ThresholdRule | LimitRule


def _metric_rule(v: Any) -> MetricRule:
    """A rule as written: ``{max: …}``/``{min: …}`` bound the value, else a drop threshold."""
    if isinstance(v, (ThresholdRule, LimitRule)):
        return v
    if isinstance(v, dict) and {"max", "min"} & v.keys():
        return LimitRule.model_validate(v)
    return ThresholdRule.model_validate(v)


class EquivalenceRule(_Strict):
    require: Literal["not_divergent", "equivalent"] = "not_divergent"


class RuleSet(BaseModel):
    """A rule per gated metric family, named as the catalogue names it (``tau: {max_drop_pct: 3}``; a bound on
    the new run's value, ``degenerate_share: {max: 0.2}``; ``null``: not gated), and ``equivalence``. A metric the rules do not name keeps the catalogue's default
    (``MetricSpec.max_drop_pct``; none: not gated): :meth:`rule`."""

    model_config = ConfigDict(extra="allow")

    equivalence: EquivalenceRule | None = EquivalenceRule()

    @model_validator(mode="before")
    @classmethod
    def _metric_rules(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        gated = {m.name for m in catalog.gate_metrics()}
        unknown = sorted(set(data) - gated - {"equivalence"})
        if unknown:
            raise ValueError(f"no gated metric {', '.join(map(repr, unknown))} (use {catalog.gate_names_help()})")
        return {k: v if k == "equivalence" or v is None else _metric_rule(v) for k, v in data.items()}

    @property
    def given(self) -> dict[str, MetricRule | None]:
        """The metric rules these rules name (without the catalogue's defaults)."""
        return dict(self.model_extra or {})

    def rule(self, family: str) -> MetricRule | None:
        """The rule for a metric family: as given, else the catalogue's default."""
        if family in self.given:
            return self.given[family]
        m = catalog.spec(family)
        return None if m is None or m.max_drop_pct is None else ThresholdRule(max_drop_pct=m.max_drop_pct)

    def __getattr__(self, name: str) -> Any:
        """``rules.tau``: :meth:`rule` of a gated metric family."""
        if not name.startswith("_") and name in {m.name for m in catalog.gate_metrics()}:
            return self.rule(name)
        return super().__getattr__(name)  # type: ignore[misc]

    def merged(self, other: RuleSet) -> RuleSet:
        """``other``'s explicitly given rules over this set."""
        eq = other.equivalence if "equivalence" in other.model_fields_set else self.equivalence
        return RuleSet.model_validate({**self.given, **other.given, "equivalence": eq})


class Override(_Strict):
    groups: list[str]
    rules: RuleSet

    @field_validator("groups", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class RatioRule(_Strict):
    """A floor on a headline ratio of the new run, e.g. DFlash's speedup over EAGLE-3 >= 1.1::

        ratios:
          - {method: dflash, over: eagle3, metric: speedup_ratio, min: 1.1}

    ``method``/``over``/``where`` are fnmatch globs (``where`` over ``target/dataset/T<t>/<load>``, e.g.
    ``qwen3-8b/gsm8k/*``). ``require: not_below`` (default) fails when the ratio's 95% interval lies
    entirely below ``min``; ``require: above`` fails unless the whole interval is at or above ``min``.
    """

    method: str
    over: str = "*"
    metric: Literal["speedup_ratio", "tau_ratio"] = "speedup_ratio"
    min: float = Field(gt=0)
    where: str = "*"
    require: Literal["not_below", "above"] = "not_below"

    def describe(self) -> str:
        return f"{self.method} {self.metric.replace('_ratio', '')} over {self.over} >= {self.min:g} ({self.require})"


ABMetric = Literal["tpot_s", "output_tps", "step_time_s"]


class ABGateRules(_Strict):
    """``specbench ab``'s speed rules (docs/ab-decision.md): the gated speed metrics of the catalogue and
    the decision rule's margin, α and first-verdict round (the cap on rounds is the suite's ``rounds``)."""

    metrics: list[ABMetric] = Field(default_factory=lambda: list[ABMetric](["tpot_s", "output_tps"]))
    margin: float = Field(0.03, gt=0, lt=1)
    alpha: float = Field(0.01, gt=0, lt=1)
    min_rounds: int = Field(12, ge=2)
    tau_max_drop_pct: float = Field(0.0, ge=0, description="τ of B below A's by more than this fails (CPU "
                                    "float32 is deterministic: identical arms give identical τ)")


class GateRules(_Strict):
    confidence: float = Field(0.95, gt=0.5, lt=1)
    family_wise: bool = True
    missing: Literal["fail", "warn"] = "fail"
    groups: list[str] = Field(default_factory=lambda: ["*"])
    rules: RuleSet = Field(default_factory=RuleSet)
    overrides: list[Override] = Field(default_factory=list)
    ratios: list[RatioRule] = Field(default_factory=list)
    ab: ABGateRules = Field(default_factory=ABGateRules)

    def gated(self, group_id: str) -> bool:
        return any(group_matches(p, group_id) for p in self.groups)

    def for_group(self, group_id: str) -> RuleSet:
        rules = self.rules
        for o in self.overrides:
            if any(group_matches(p, group_id) for p in o.groups):
                rules = rules.merged(o.rules)
        return rules


def gated_name(name: str) -> bool:
    """Whether ``name`` is a gated metric (``per_position.<i>``, ``accuracy.<key>``), by the catalogue now."""
    return re.match(catalog.metric_pattern(), name) is not None


class ExpectedMetric(_Strict):
    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    tolerance_pct: float | None = Field(None, ge=0)
    tolerance_abs: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _bracket(self) -> ExpectedMetric:
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError("give both ci_low and ci_high, or neither")
        if self.ci_low is not None and self.ci_high is not None and not self.ci_low <= self.value <= self.ci_high:
            raise ValueError("need ci_low <= value <= ci_high")
        return self

    def estimate(self) -> Estimate:
        lo = self.value if self.ci_low is None else self.ci_low
        hi = self.value if self.ci_high is None else self.ci_high
        return Estimate(value=self.value, ci_low=lo, ci_high=hi, n=self.n, method="expected")


class ExpectedValues(_Strict):
    description: str | None = None
    groups: dict[str, dict[str, ExpectedMetric]]

    @field_validator("groups")
    @classmethod
    def _names(cls, v: dict[str, dict[str, ExpectedMetric]]) -> dict[str, dict[str, ExpectedMetric]]:
        for gid, metrics in v.items():
            for name in metrics:
                if not gated_name(name):
                    raise ValueError(f"{gid}: unknown metric {name!r} (use {catalog.gate_names_help()})")
        return v


def expected_from_run(summary: RunSummary, tolerance_pct: float | None = None) -> ExpectedValues:
    """Expected values (with the run's intervals) for every measured group of a run."""
    groups = {}
    for g in summary.groups:
        metrics = {k: ExpectedMetric(value=e.value, ci_low=e.ci_low, ci_high=e.ci_high, n=e.n,
                                     tolerance_pct=tolerance_pct)
                   for k, e in metric_estimates(g).items() if e.value is not None}
        if metrics:
            groups[g.group_id] = metrics
    return ExpectedValues(description=f"from run {summary.run_id}", groups=groups)


# --------------------------------------------------------------------------
# loading


def _errors(where: str, err: ValidationError) -> str:
    return "\n".join(f"{where}: {'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors())


def load_rules(path: Path | None) -> GateRules:
    """Gate rules from YAML (defaults when ``path`` is None); :class:`GateConfigError` when malformed."""
    if path is None:
        return GateRules()
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise GateConfigError(f"{path}: cannot read rules: {exc}") from None
    except yaml.YAMLError as exc:
        raise GateConfigError(f"{path}: invalid YAML: {exc}") from None
    if data is None:
        return GateRules()
    if not isinstance(data, dict):
        raise GateConfigError(f"{path}: gate rules must be a mapping (confidence, rules, overrides, ...)")
    try:
        return GateRules.model_validate(data)
    except ValidationError as err:
        raise GateConfigError(_errors(str(path), err)) from None


def check_rule_categories(rules: GateRules, path: Path | None, new: RunSummary) -> None:
    """A rule's category selector without wildcards must name a category of the new run's slices
    (a misspelt one would gate nothing, silently); :class:`GateConfigError` with ``file:line``."""
    if path is None:
        return
    known = sorted({g.slice.category for g in new.groups if g.slice is not None and g.slice.category is not None})
    lines = Path(path).read_text().splitlines()
    for pattern in [*rules.groups, *(p for o in rules.overrides for p in o.groups)]:
        head, _, last = pattern.rpartition("/")
        if not (head and "=" in last):
            continue
        glob = parse_selector(last).get("category")
        if glob is None or any(ch in glob for ch in "*?[") or glob in known:
            continue
        line = next((i for i, text in enumerate(lines, 1) if pattern in text), 1)
        raise GateConfigError(f"{path}:{line}: unknown category {glob!r} in {pattern!r}; the run's categories: "
                              f"{', '.join(known) or 'none (no dataset of two or more categories)'}")


def load_baseline(path: Path) -> RunSummary | ExpectedValues:
    """A stored run (directory or summary.json) or an expected-values JSON file."""
    path = Path(path)
    if path.is_dir() or path.name == rundir.SUMMARY:  # a stored run: results/ reads it
        try:
            return rundir.read_summary(path)
        except rundir.StoreError as exc:
            raise GateConfigError(str(exc)) from None
        except ValidationError as err:
            raise GateConfigError(_errors(str(path), err)) from None
    file = path
    try:
        data = json.loads(file.read_text())
    except OSError as exc:
        raise GateConfigError(f"{file}: cannot read baseline: {exc}") from None
    except json.JSONDecodeError as exc:
        raise GateConfigError(f"{file}: invalid JSON: {exc}") from None
    if not isinstance(data, dict) or "groups" not in data:
        raise GateConfigError(f"{file}: not a run summary nor expected values (no 'groups')")
    try:
        return RunSummary.load(data) if isinstance(data["groups"], list) else ExpectedValues.model_validate(data)
    except SchemaError as exc:
        raise GateConfigError(f"{file}: {exc}") from None
    except ValidationError as err:
        raise GateConfigError(_errors(str(file), err)) from None


# --------------------------------------------------------------------------
# evaluation


class GateCheck(_Strict):
    group_id: str
    metric: str
    rule: str
    passed: bool
    message: str
    change: MetricChange | None = None
    first_run: str | None = None  # history gate: the run where the worse level began


class GateResult(_Strict):
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

    # Baseline metrics per gated group: (estimate, tolerance_pct, tolerance_abs).
    base: dict[str, dict[str, tuple[Estimate, float | None, float | None]]] = {}
    if isinstance(baseline, RunSummary):
        for g in baseline.groups:
            if rules.gated(g.group_id) and _measured(g):
                base[g.group_id] = {k: (e, None, None) for k, e in metric_estimates(g).items()}
    else:
        for gid, expected in baseline.groups.items():
            if rules.gated(gid):
                base[gid] = {k: (m.estimate(), m.tolerance_pct, m.tolerance_abs) for k, m in expected.items()}
    if base and not base.keys() & gated_new.keys():
        result.exit_code, result.status = 2, "bad input"
        result.errors.append("no group of the new run is in the baseline: wrong baseline or suite?")
        return result

    todo: list[tuple[str, str, ThresholdRule, float, Estimate, Estimate, float | None, float | None]] = []
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
            floor = speed_floor(name, rule, isinstance(baseline, RunSummary), noise)
            if floor is None:
                not_gated.append(f"{name} on {gid}")
                continue
            todo.append((gid, name, rule, floor, b_est, now[name], tol_pct, tol_abs))
    if not_gated:
        result.warnings.append(f"{NOT_GATED} ({len(not_gated)} comparisons, e.g. {not_gated[0]}): calibrate one "
                               "on identical-code runs (specbench calibrate RUN RUN ..., then --noise FILE or runs "
                               "analysed beside it) or give the rule a noise_floor_pct")
    m = sum(1 for item in todo if item[4].ci_low is not None and item[5].ci_low is not None)
    result.n_comparisons = m
    result.widen = bonferroni_widen(m if rules.family_wise else 1, rules.confidence)
    # expected values (a history window's median and MAD band) hold the run-to-run spread already
    base_calibrated = not isinstance(baseline, RunSummary) or baseline.extra.speed_noise is not None
    new_calibrated = new.extra.speed_noise is not None
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

    eq_groups = {gid: g for gid, g in gated_new.items()
                 if rules.for_group(gid).equivalence is not None and equivalence_verdict(g) is not None and _measured(g)
                 and g.lossy is None}  # a lossy group diverges by construction (its report says why)
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
    _limit_checks(result, gated_new, rules)
    result.notes += _detectable(todo, result.widen)
    _ratio_checks(result, new, rules)
    if result.failures:
        result.exit_code, result.status = 1, "regression"
    return result


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


def _detectable(todo: list, widen: float) -> list[str]:
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


def render_gate(result: GateResult) -> str:
    """Markdown verdict: every failing rule with its numbers, then warnings, then all checks."""
    head = {"pass": "PASS", "regression": "FAIL", "bad input": "ERROR", "nothing measured": "ERROR"}[result.status]
    lines = [f"## specbench gate: {head} (exit {result.exit_code}, {result.status})", "",
             f"Baseline: {result.baseline}. {len(result.checks)} checks; differences at "
             f"{100 * result.confidence:g}% " + (f"family-wise over {result.n_comparisons} comparisons "
                                                 f"(intervals ×{result.widen:.2f})." if result.n_comparisons else "."),
             ""]
    lines += [f"- ERROR: {e}" for e in result.errors]
    if result.failures:
        lines += [f"Failing rules ({len(result.failures)}):", ""] + [f"- {c.message}" for c in result.failures]
    lines += [""] if result.failures or result.errors else []
    if result.warnings:
        lines += ["Warnings:", ""] + [f"- {w}" for w in result.warnings] + [""]
    if result.notes:
        lines += ["What the speed rules can see:", ""] + [f"- {n}" for n in result.notes] + [
            "- Speed compared between runs made at different times is a trend, not a gate: to gate speed, "
            "measure both sides in one job (`specbench ab`, docs/ab.md).", ""]
    passed = [c for c in result.checks if c.passed]
    if passed:
        lines += ["<details>", f"<summary>{len(passed)} passing checks</summary>", ""]
        lines += [f"- {c.message}" for c in passed] + ["", "</details>", ""]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


__all__ = [
    "ExpectedMetric", "ExpectedValues", "GateCheck", "GateConfigError", "GateResult",
    "GateRules", "LimitRule", "RatioRule", "RuleSet", "ThresholdRule", "evaluate_gate", "expected_from_run", "load_baseline", "load_rules",
    "render_gate",
]
