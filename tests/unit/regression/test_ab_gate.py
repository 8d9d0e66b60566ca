"""The A/B gate's exit codes (issue 36) on hand-built results."""

from __future__ import annotations

from specbench.analysis.ab_decision import ABRule, ABVerdict
from specbench.analysis.ab_rounds import ABResult, GroupExact
from specbench.regression.ab_gate import ab_outcome
from specbench.regression.gate_rules import ABGateRules
from specbench.report.ab_summary import render_ab_markdown
from specbench.stats import Estimate


def _v(verdict: str, value: float = 1.0) -> ABVerdict:
    return ABVerdict(metric="tpot_s", verdict=verdict, ratio=Estimate(value=value, ci_low=value - .01, ci_high=value + .01,
                     n=12, rounds=12), rounds=12, margin=.03, alpha=.01, spread=.02, more_rounds_help=False,
                     rounds_to_decide=None)


def _result(*verdicts: str, exact: list[GroupExact] | None = None, budget_ended: bool = False) -> ABResult:
    return ABResult(rule=ABRule(), metrics=["tpot_s"], arms={"a": "this environment", "b": "/x/python"},
                    groups=[_v(v) for v in verdicts], group_ids=[f"tiny/m{i}/he/T0/b1" for i in range(len(verdicts))],
                    exact=exact or [], rounds_run=12, budget_ended=budget_ended)


def test_exit_codes() -> None:
    rules = ABGateRules()
    assert ab_outcome(_result("same", "improved"), rules).exit_code == 0
    out = ab_outcome(_result("same", "different"), rules)
    assert out.exit_code == 1 and out.failures[0].startswith("tiny/m1/he/T0/b1: TPOT B/A")
    und = ab_outcome(_result("same", "undecided", budget_ended=True), rules)
    assert und.exit_code == 0 and "time budget ended" in und.notes[0]
    assert ab_outcome(_result("same", "undecided"), rules, strict=True).exit_code == 1
    assert ab_outcome(_result(), rules).exit_code == 3
    drop = [GroupExact(group="tiny/eagle3/he/T0/b1", tau_a=2.5, tau_b=2.4, identical=3, compared=4)]
    assert ab_outcome(_result("same", exact=drop), rules).exit_code == 1
    assert ab_outcome(_result("same", exact=drop), ABGateRules(tau_max_drop_pct=5)).exit_code == 0


def test_the_summary_names_arms_rule_verdicts_and_failures() -> None:
    res = _result("same", "different")
    md = render_ab_markdown(res, ab_outcome(res, ABGateRules()), "cpu-gate")
    assert md.startswith("## specbench ab · cpu-gate: FAIL")
    assert "- **B**: /x/python" in md and "α = 0.01" in md and "±3%" in md
    assert "| tiny/m1/he/T0/b1 | TPOT | 1.000 [0.990, 1.010] | **different** | 12 |" in md
    assert len(md.splitlines()) < 40
