"""Synthetic acceptance (vLLM's ``rejection_sample_method: synthetic``) maps the hardware's speedup
against a set acceptance: its groups are marked lossy from the suite, shown as such, and never
stand in for a drafter (issue 37): not in the headline, the K prediction or the schedule."""

from __future__ import annotations

from support.factories import group, run_summary
from support.paths import SUITES

from specbench.analysis import k_prediction, k_schedule
from specbench.analysis.method_comparison import headline_ratios
from specbench.config.plan import SYNTHETIC, expand
from specbench.config.suite import load_suite
from specbench.report.markdown import render_markdown
from specbench.stats import Estimate


def test_the_gpu_suites_synthetic_methods_plan_lossy_cells_and_nothing_else_does() -> None:
    cells = expand(load_suite(SUITES / "gpu-schedule.yaml")).cells
    lossy = {c.method for c in cells if c.lossy}
    assert lossy and all(m.startswith("synthetic") for m in lossy)
    assert {c.lossy for c in cells if c.method in lossy} == {SYNTHETIC}
    assert all(c.lossy is None for c in cells if c.method not in lossy)


def _groups() -> list:
    tau = Estimate(value=2.0, ci_low=1.9, ci_high=2.1, n=4)
    return [group("baseline", k=None),
            group("eagle3", k=3, tau=tau, n_requests=4, output_tps=Estimate(value=10.0)),
            group("dflash", k=3, tau=tau, n_requests=4, output_tps=Estimate(value=11.0)),
            group("synthetic-tau2", kind="eagle3", k=3, tau=tau, n_requests=4, output_tps=Estimate(value=15.0),
                  lossy=SYNTHETIC)]


def test_a_lossy_group_is_not_a_drafter_in_the_headline_the_prediction_or_the_schedule() -> None:
    groups = _groups()
    rows = headline_ratios(groups, {}, {"t": "eagle3"})
    assert {r.method for r in rows} == {"dflash"}
    assert all(p.method != "synthetic-tau2" for p in k_prediction.predictions(groups, {}))
    sf = k_schedule.schedules("r", "s", groups, {})
    assert not any("synthetic" in s for s in sf.skipped) and not sf.checks


def test_the_report_marks_a_lossy_group_and_says_why() -> None:
    text = render_markdown(run_summary(_groups()))
    assert "| synthetic-tau2 (lossy) |" in text
    assert f"(lossy): {SYNTHETIC}." in text and "no drafter's" in text
