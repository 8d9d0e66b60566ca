"""An A/B run's section and figure in the full report (issue 36), from a hand-built result."""

from __future__ import annotations

from specbench.analysis.ab_decision import ABRule, ABVerdict
from specbench.analysis.ab_rounds import ABResult, GroupExact
from specbench.report.ab_summary import ab_figure, ab_section
from specbench.report.document import Table
from specbench.stats import Estimate


def _result() -> ABResult:
    def v(verdict: str, value: float, metric: str = "tpot_s") -> ABVerdict:
        return ABVerdict(metric=metric, verdict=verdict, ratio=Estimate(value=value, ci_low=value * .97, ci_high=value * 1.03,
                         n=14, rounds=14), rounds=14, margin=.03, alpha=.01, spread=.03, more_rounds_help=False,
                         rounds_to_decide=None)
    return ABResult(rule=ABRule(), metrics=["tpot_s", "output_tps"], arms={"a": "base", "b": "head"},
                    groups=[v("same", 1.0), v("different", 1.12), v("same", 1.0, "output_tps")],
                    group_ids=["t/baseline/d/T0/b1", "t/eagle3/d/T0/b1", "t/baseline/d/T0/b1"],
                    pooled=[v("different", 1.06)], pooled_ids=["t/eagle3"],
                    exact=[GroupExact(group="t/eagle3/d/T0/b1", tau_a=2.5, tau_b=2.5, identical=8, compared=8)],
                    rounds_run=14)


def test_the_section_lists_every_verdict_and_the_exact_comparisons() -> None:
    sec = ab_section(_result())
    assert sec.title == "A/B" and sec.anchor == "ab"
    verdicts, exact = [b for b in sec.blocks if isinstance(b, Table)]
    assert [r[3] for r in verdicts.rows] == ["same", "different", "same", "different"]
    assert verdicts.rows[3][0] == "t/eagle3 (pooled, 1 groups)" and verdicts.rows[1][2] == "1.120 [1.086, 1.154]"
    assert exact.rows == [["t/eagle3/d/T0/b1", "2.5000", "2.5000", "8 / 8"]]


def test_the_figure_is_a_png_with_one_panel_per_metric() -> None:
    png = ab_figure(_result())
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    empty = _result().model_copy(update={"groups": [], "group_ids": [], "pooled": [], "pooled_ids": []})
    assert ab_figure(empty) is None


def test_over_engine_instances_the_rule_says_its_unit_is_an_instance() -> None:
    from specbench.regression.ab_gate import ABGateOutcome
    from specbench.report.ab_summary import render_ab_markdown

    per_round = render_ab_markdown(_result(), ABGateOutcome(1, [], []), "s")
    assert "no verdict before round 12; 14 round(s) run (cap 40)" in per_round and "| verdict | rounds |" in per_round
    over = _result().model_copy(update={"instances": 8, "rounds_run": 24, "rule": ABRule(min_rounds=8, max_rounds=8)})
    md = render_ab_markdown(over, ABGateOutcome(1, [], []), "s")
    assert "B/A per engine instance" in md and "24 round(s) run on 8 instances (cap 8 instances)" in md
    assert "| verdict | instances |" in md
    table = [b for b in ab_section(over).blocks if isinstance(b, Table)][0]
    assert table.headers[4] == "instances"
