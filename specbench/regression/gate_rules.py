"""The regression gate's rules: their schema (per metric family, per group, ratio floors, ``specbench ab``'s
speed rules) and the YAML that holds them (``--rules``; see ``gates.example.yaml``)::

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

How the rules judge a run: :mod:`specbench.regression.gate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specbench.errors import SpecbenchError
from specbench.results import metric_catalog as catalog
from specbench.results.slices import group_matches, parse_selector
from specbench.results.summary import RunSummary


class GateConfigError(SpecbenchError):
    """Malformed rules or baseline (exit code 2)."""


class StrictGateModel(BaseModel):
    """A part of the gate's rules, baseline or result: an unknown field is an error."""

    model_config = ConfigDict(extra="forbid")


class ThresholdRule(StrictGateModel):
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


class LimitRule(StrictGateModel):
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


class EquivalenceRule(StrictGateModel):
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


class Override(StrictGateModel):
    groups: list[str]
    rules: RuleSet

    @field_validator("groups", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class RatioRule(StrictGateModel):
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


class ABGateRules(StrictGateModel):
    """``specbench ab``'s speed rules (docs/ab-decision.md): the gated speed metrics of the catalogue and
    the decision rule's margin, α and first-verdict round (the cap on rounds is the suite's ``rounds``)."""

    metrics: list[ABMetric] = Field(default_factory=lambda: list[ABMetric](["tpot_s", "output_tps"]))
    margin: float = Field(0.03, gt=0, lt=1)
    alpha: float = Field(0.01, gt=0, lt=1)
    min_rounds: int = Field(12, ge=2)
    tau_max_drop_pct: float = Field(0.0, ge=0, description="τ of B below A's by more than this fails (CPU "
                                    "float32 is deterministic: identical arms give identical τ)")


class GateRules(StrictGateModel):
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



def validation_lines(where: str, err: ValidationError) -> str:
    """A pydantic error of a rules or baseline file, one ``where: field: message`` line per problem."""
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
        raise GateConfigError(validation_lines(str(path), err)) from None


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
