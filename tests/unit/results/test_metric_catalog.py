"""The metric catalogue (specbench.results.metric_catalog) against the summary model and its consumers."""

from __future__ import annotations

import re
import types
import typing
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel
from support.factories import group

from specbench.analysis import sequential
from specbench.config import stop_rule
from specbench.frames import estimate_columns
from specbench.regression import gate_baseline, gate_rules, run_diff
from specbench.regression.history import group_metrics
from specbench.report import early_stopping_section as report_stopping
from specbench.report import trend
from specbench.results import metric_catalog as catalog
from specbench.results.parts import Dist, HeadlineRow, NonDegenerate, ServingSummary, VerificationSpent
from specbench.results.records import SpecCounters
from specbench.results.slices import SLICE_KEYS, Slice
from specbench.results.summary import GroupSummary
from specbench.stats import Estimate

E = Estimate(value=0.5, ci_low=0.4, ci_high=0.6, n=10, method="bootstrap")


def _leaves(annotation: Any) -> list[Any]:
    """The types an annotation can hold (Optional, list, dict values unwrapped)."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return [t for a in get_args(annotation) for t in _leaves(a)]
    if origin is list:
        return _leaves(get_args(annotation)[0])
    if origin is dict:
        return _leaves(get_args(annotation)[1])
    return [annotation]


def numeric_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted names of every field of ``model`` that holds numbers (nested models other than Estimate unrolled)."""
    out = []
    for name, info in model.model_fields.items():
        leaves = _leaves(info.annotation)
        nested = [t for t in leaves if isinstance(t, type) and issubclass(t, BaseModel) and t is not Estimate]
        if nested:
            for t in nested:
                out += numeric_fields(t, f"{prefix}{name}.")
        elif any(t is Estimate or t in (int, float) for t in leaves):
            out.append(prefix + name)
    return out


def _resolve(model: type[BaseModel], dotted: str) -> bool:
    head, _, rest = dotted.partition(".")
    if head not in model.model_fields:
        return False
    if not rest:
        return True
    nested = [t for t in _leaves(model.model_fields[head].annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    return any(_resolve(t, rest) for t in nested)


#: Group fields that are not the group's metrics: its slice keys (dimensions, checked below), its cells'
#: status lines (a stopped cell's StopRecord, shown in the report's early-stopping section), the published
#: values it is compared with (a suite's references, not measured) and, for a later conversation turn, how
#: many conversations its comparisons were judged on (a count of the subset, shown beside them); ``metrics``
#: holds the catalogue's computed metrics by name (each one's entry is the catalogue's, checked elsewhere).
NOT_METRICS = {"slice", "cells", "reference", "turn1_identical", "metrics"}


def test_every_numeric_group_field_has_a_catalogue_entry() -> None:
    fields = [f for f in numeric_fields(GroupSummary) if f.split(".")[0] not in NOT_METRICS]
    assert {"tau", "per_position", "counters.num_drafts", "verification.wasted_per_emitted"} <= set(fields)
    declared = {m.summary_field for m in catalog.CATALOG if m.source == "group"}
    verdicts = {m.summary_field for m in catalog.CATALOG if m.verdict}  # a verdict's entry covers its test's details
    missing = [f for f in fields if f not in declared and f.split(".")[0] not in catalog.DIMENSIONS
               and f.split(".")[0] not in verdicts]
    assert missing == [], f"GroupSummary fields without a catalogue entry: {missing}"


def test_every_entry_names_a_field_that_exists() -> None:
    models: dict[str, type[BaseModel]] = {"group": GroupSummary, "serving": ServingSummary, "headline": HeadlineRow}
    bad = [m.name for m in catalog.CATALOG if m.compute is None and not _resolve(models[m.source], m.summary_field)]
    assert bad == []
    assert all(d in GroupSummary.model_fields for d in catalog.GROUP_KEYS)
    assert catalog.DIMENSIONS[-len(SLICE_KEYS):] == tuple(Slice.model_fields) == SLICE_KEYS


def test_entries_are_complete_and_unique() -> None:
    assert len(catalog.by_name()) == len(catalog.CATALOG)
    for m in catalog.CATALOG:
        assert m.label and m.definition and m.direction in ("higher", "lower", "none"), m.name
        assert m.stop is None or m.source == "group", m.name
        if m.gate or m.speed:
            assert m.direction != "none", m.name  # a gated metric needs a bad direction
    assert all("n:" in m.definition for m in catalog.CATALOG if m.gate)  # the unit of n, for every tested metric


def full_group() -> GroupSummary:
    return group(
        "m", "eagle3", 3, n_requests=10, counters=SpecCounters(num_drafts=4), tau=E, tau_per_request=E,
        per_position=[E, E], draft_acceptance_rate=E, output_tps=E, throughput_tps=E, latency_s=E,
        latency_p50_s=0.1, latency_p90_s=0.2, latency_p99_s=0.3, ttft_s=E, tpot_s=E, step_time_s=E, goodput=E,
        goodput_share=E,
        verification=VerificationSpent(drafted_per_step=E, accepted_per_verified=E, wasted_per_emitted=E),
        speedup=E, greedy_match=E, accuracy={"strict": E}, accuracy_delta={"strict": E},
        non_degenerate=NonDegenerate(tau=E, tokens_per_step=E, speedup=E),
        metrics={m.name: E for m in catalog.computed_metrics()},
    )


def _families(names: typing.Iterable[str]) -> set[str]:
    return {catalog.family(n) for n in names}


def test_compare_and_gate_read_the_catalogue() -> None:
    gated = {m.name for m in catalog.gate_metrics()}
    assert _families(run_diff.metric_estimates(full_group())) == gated
    assert set(gate_rules.RuleSet.model_fields) == {"equivalence"}  # a rule per gated metric, named by the catalogue
    assert {name for name in gated if gate_rules.RuleSet().rule(name) is not None} == {"tau", "speedup", "accuracy"}
    assert set(get_args(gate_rules.RatioRule.model_fields["metric"].annotation)) == {
        m.name for m in catalog.gate_metrics("headline")}
    # measured in time (an A/A calibration covers each; compare and gate test the gated ones)
    assert run_diff.SPEED_METRICS == {"output_tps", "speedup", "speedup_ratio", "throughput_tps", "latency_s",
                                      "ttft_s", "tpot_s", "step_time_s", "non_degenerate.speedup", "goodput",
                                      "goodput_share"} == catalog.speed_metrics()
    for name in run_diff.metric_estimates(full_group()):
        assert gate_baseline.gated_name(name), name
    for name in ("tpot_s", "per_position.0", "latency_s"):
        assert not gate_baseline.gated_name(name), name
    with pytest.raises(ValueError, match=re.escape(catalog.gate_names_help())):
        gate_baseline.ExpectedValues(groups={"g": {"tpot_s": gate_baseline.ExpectedMetric(value=1.0)}})


def test_history_frames_and_trend_read_the_catalogue() -> None:
    stored = {m.name for m in catalog.history_metrics() if not m.verdict}
    assert _families(group_metrics(full_group())) == stored
    columns = estimate_columns()
    assert set(columns) <= stored and "per_position" not in columns and "latency_p50_s" not in columns
    assert columns == ("tau", "tau_per_request", "degenerate_share", "short_share", "non_degenerate.tau",
                       "non_degenerate.tokens_per_step", "non_degenerate.speedup", "draft_acceptance_rate",
                       "output_tps", "throughput_tps", "latency_s", "ttft_s", "speedup",
                       "greedy_match", "goodput", "goodput_share")  # load()'s columns, in their order
    for name in ("tau", "accuracy.strict", "latency_p50_s", "serving.itl_p99_s", "ttft_s", "throughput_tps"):
        assert trend.higher_is_better(name) == (catalog.spec(name).direction != "lower")  # type: ignore[union-attr]
    assert all(catalog.spec(p.rstrip(".")) is not None for p in trend.FIGURE_METRICS)


def test_early_stopping_reads_the_catalogue() -> None:
    stops = catalog.stop_metrics()
    # config ranks below results, so the suite's Literal stays in stop_rule; it must be the catalogue's set.
    assert set(stop_rule.METRICS) == set(get_args(stop_rule.Metric)) == set(stops)
    assert set(sequential.UNIT_COLUMNS) == set(stops)
    assert report_stopping.METRIC_NAMES == {"tau": "τ", "speedup": "speedup", "tpot": "TPOT (s)",
                                            "accuracy": "accuracy"}


def test_one_direction_and_one_set_of_digits() -> None:
    assert not catalog.higher_is_better("tpot_s") and not catalog.higher_is_better("serving.ttft_p50_s")
    assert catalog.higher_is_better("per_position.3") and catalog.higher_is_better("unknown")
    # compare and trend print τ with the same digits: 2
    e = Estimate(value=2.5678, ci_low=2.5, ci_high=2.6)
    assert run_diff._digits("tau", e) == catalog.digits("tau", e.value) == 2
    assert run_diff._digits("tiny/dflash÷eagle3/gsm8k/T0.5/b4:tau_ratio", e) == 2
    assert catalog.digits("ttft_s", 0.01234) == 4 and catalog.digits("output_tps", 123.4) == 0
    assert catalog.digits("per_position.2", 0.5) == 2


def test_serving_entries_name_dist_fields() -> None:
    for m in catalog.history_metrics("serving"):
        quantity, stat = m.summary_field.split(".")
        assert ServingSummary.model_fields[quantity].annotation is Dist and stat in Dist.model_fields
