"""How estimates read: a speedup interval from two or three rounds (the A/B rule's t-corrected sequence can
reach 10⁶) prints its far ends as bounds; the headline's verdict says its rounds and, undecided, how many
would decide."""

from __future__ import annotations

from specbench.report.terminal import rounds_said_of
from specbench.results.fmt import fmt_est, fmt_speedup
from specbench.results.parts import HeadlineRow
from specbench.stats import Estimate


def test_a_speedup_interval_beyond_a_hundredfold_reads_as_bounds() -> None:
    wide = Estimate(value=0.79, ci_low=1e-7, ci_high=1132326.57, n=2, rounds=2)
    assert fmt_speedup(wide) == "0.79× [<0.01, >100] (2 rounds)"
    assert fmt_speedup(Estimate(value=1.01, ci_low=0.16, ci_high=6.21, n=4)) == "1.01× [0.16, 6.21]"
    assert fmt_est(wide, 2) == "0.79 [0.00, 1132326.57] (2 rounds)"  # other quantities keep their digits


def _row(verdict: str, rounds: int | None, to_decide: int | None) -> HeadlineRow:
    e = Estimate(value=1.0, ci_low=0.9, ci_high=1.1, n=4)
    return HeadlineRow(target="t", dataset="d", temperature=0.0, batch_size=4, method="dflash", method_kind="dflash",
                       method_group="g", method_k=3, reference="eagle3", reference_group="r", reference_k=3,
                       n_prompts=16, tau_ratio=e, speedup_ratio=e, verdict=verdict, rounds=rounds,  # type: ignore[arg-type]
                       rounds_to_decide=to_decide)


def test_the_verdict_says_its_rounds_and_what_would_decide_it() -> None:
    assert rounds_said_of(_row("undecided", 4, 23)) == " (4 rounds; ~23 rounds would decide)"
    assert rounds_said_of(_row("undecided", 4, None)) == " (4 rounds)"
    assert rounds_said_of(_row("faster", 4, None)) == " (4 rounds)"
    assert rounds_said_of(_row("not distinguishable", None, None)) == ""
