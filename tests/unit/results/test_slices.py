"""Slice keys of a group (specbench.results.slices): ids, parsing, rule matching, stored summaries."""

from __future__ import annotations

import functools
import json

import pytest
from support.factories import group, run_summary
from support.paths import FIXTURES

from specbench.frames import groups_frame
from specbench.regression.gate_rules import GateRules, Override, RuleSet, ThresholdRule
from specbench.results.slices import (
    SLICE_KEYS,
    Slice,
    SliceError,
    group_matches,
    parse_selector,
    parse_slice,
    selector_matches,
    sliced_group_id,
    split_group_id,
)
from specbench.results.summary import GroupSummary, RunSummary

GID = "tiny/eagle3/spec_bench/T0/b1"


def test_slice_ids_in_key_order_and_back() -> None:
    s = Slice(turn=2, category="coding")
    assert s.id == "category=coding,turn=2" and SLICE_KEYS == ("category", "turn", "input_tokens", "round")
    assert parse_slice(s.id) == s and parse_slice("") == Slice() and Slice().empty and Slice().id == ""
    assert parse_slice("input_tokens=384,round=0") == Slice(input_tokens=384, round=0)
    for bad in ("colour=red", "category", "turn=two", "turn=0", "category=a,category=b", "category=a/b"):
        with pytest.raises(SliceError):
            parse_slice(bad)
    with pytest.raises(ValueError, match="group id"):
        Slice(category="code review")


def test_a_group_without_slice_keeps_its_id() -> None:
    assert sliced_group_id(GID, None) == GID == sliced_group_id(GID, Slice())
    sid = sliced_group_id(GID, Slice(category="coding", turn=2))
    assert sid == GID + "/category=coding,turn=2"
    assert split_group_id(sid) == (GID, Slice(category="coding", turn=2)) and split_group_id(GID) == (GID, Slice())
    assert split_group_id("tiny/ngram/gsm8k/T0.5/rate2") == ("tiny/ngram/gsm8k/T0.5/rate2", Slice())


def test_rule_globs_match_groups_and_their_slices() -> None:
    coding = sliced_group_id(GID, Slice(category="coding"))
    math2 = sliced_group_id(GID, Slice(category="math", turn=2))
    for gid in (GID, coding, math2):  # an existing glob covers a group and every slice of it
        assert group_matches("*/eagle3/*", gid) and not group_matches("*/ngram/*", gid)
    assert group_matches(GID, GID) and not group_matches(GID, coding)
    assert group_matches("*/eagle3/*/category=cod*", coding)
    assert not group_matches("*/eagle3/*/category=cod*", math2) and not group_matches("*/eagle3/*/category=*", GID)
    assert group_matches("*/eagle3/spec_bench/*/category=*,turn=2", math2)
    assert not group_matches("*/eagle3/spec_bench/*/turn=2", coding)
    assert selector_matches(parse_selector("turn=[12]"), Slice(turn=1)) and selector_matches({}, Slice())
    with pytest.raises(SliceError, match="not one of"):
        parse_selector("lang=py")


def test_gate_rules_address_a_slice() -> None:
    rules = GateRules(groups=["*/eagle3/*"], overrides=[Override(
        groups=["*/eagle3/*/category=coding"], rules=RuleSet(tau=ThresholdRule(max_drop_pct=1)))])
    coding = sliced_group_id(GID, Slice(category="coding"))
    assert rules.gated(coding) and rules.gated(GID)
    assert rules.for_group(coding).tau.max_drop_pct == 1  # type: ignore[union-attr]
    assert rules.for_group(GID).tau.max_drop_pct == 3  # type: ignore[union-attr]


#: A greedy EAGLE-3 group at K=3 (``GID``), with the fields a test gives.
_group = functools.partial(group, "eagle3", k=3, target="tiny", dataset="spec_bench")


def test_stored_summaries_keep_their_shape() -> None:
    plain = _group()
    assert "slice" not in plain.model_dump(mode="json") and "slice" not in json.loads(plain.model_dump_json())
    sliced = _group(group_id=GID + "/category=coding", slice={"category": "coding"})
    data = sliced.model_dump(mode="json")
    assert data["slice"] == {"category": "coding", "turn": None, "input_tokens": None, "round": None}
    assert GroupSummary.model_validate(data) == sliced
    assert sliced.baseline_key != plain.baseline_key and plain.baseline_key[-1] == ""
    for name in ("summary_full.json", "summary_minimal.json", "schema/summary_v1_full.json"):
        raw = json.loads((FIXTURES / name).read_text())  # written before slices existed
        groups = RunSummary.load(raw).model_dump(mode="json")["groups"]
        # what the model wrote before slices: turn1_identical is stored under the group's "extra", last
        # (and "metrics", the catalogue's computed metrics, only when there are any; "non_degenerate" and the
        # goodput under a suite's SLOs only when computed)
        before = [f for f in GroupSummary.model_fields
                  if f not in ("slice", "turn1_identical", "metrics", "non_degenerate", "goodput", "goodput_share")]
        before += ["extra"]
        assert groups and all(list(g) == before for g in groups), name


def test_frames_carry_slice_keys_only_when_a_run_has_slices() -> None:
    run = run_summary([_group()])
    assert not set(SLICE_KEYS) & set(groups_frame(run).columns)
    run = run_summary([
        _group(), _group(group_id=GID + "/category=coding,turn=2", slice={"category": "coding", "turn": 2})])
    df = groups_frame(run)
    assert df["category"].isna().tolist() == [True, False] and df["category"].iloc[1] == "coding"
    assert df["turn"].fillna(0).tolist() == [0, 2] and df["input_tokens"].isna().all()


def test_turn_one_identity_is_typed_and_stored_where_it_always_was() -> None:
    g = _group(turn1_identical={"identical": 3, "conversations": 4})
    data = g.model_dump(mode="json")
    assert data["extra"] == {"turn1_identical": {"identical": 3, "conversations": 4}} and "turn1_identical" not in data
    back = GroupSummary.model_validate(data)
    assert back.turn1_identical is not None and back.turn1_identical.identical == 3 and back == g
