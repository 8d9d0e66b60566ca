"""The A/B runner's decisions between rounds (issue 36): give only undecided groups more rounds.

:class:`RoundDecisions` is the round hook of :func:`specbench.execution.rounds.run_interleaved` for an
A/B run: after every round it recomputes the paired rounds of every group from the records so far
(:func:`specbench.analysis.ab_rounds.paired_rounds`), applies the rule to each gated metric, and
returns the cells of the groups that need no more rounds: every gated metric decided. Undecided
groups go on until the suite's cap on rounds; once the time budget is spent it returns every cell:
the run ends after that round and what is undecided stays so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from specbench.analysis.ab_decision import ABRule
from specbench.analysis.ab_rounds import decide_groups, group_of, paired_rounds
from specbench.results.records import RequestRecord


class RoundDecisions:
    def __init__(self, rule: ABRule, metrics: Sequence[str], budget_s: float | None = None):
        self.rule, self.metrics = rule, list(metrics)
        self.budget_s = budget_s
        self.started = time.monotonic()
        self.records: list[RequestRecord] = []
        self.rounds = 0
        self.budget_ended = False
        self.log: list[str] = []  # one line per round: what was decided

    def __call__(self, round_index: int, records: list[RequestRecord]) -> set[str]:
        self.records += records
        self.rounds = round_index + 1
        cells: dict[str, set[str]] = {}
        for r in self.records:
            cells.setdefault(group_of(r.cell_id)[0], set()).add(r.cell_id)
        groups, _ = decide_groups(paired_rounds(self.records), self.metrics, self.rule)
        open_groups = {g for g, v in groups if v.verdict == "undecided"}
        open_groups |= {g for g in cells if not any(g == h for h, _ in groups)}  # nothing paired yet
        elapsed = time.monotonic() - self.started
        self.log.append(f"round {round_index + 1}: {len(cells) - len(open_groups)} of {len(cells)} groups done "
                        f"({elapsed:.0f} s)")
        if self.budget_s is not None and elapsed >= self.budget_s and open_groups:
            self.budget_ended = True
            self.log.append(f"budget of {self.budget_s:.0f} s spent: {len(open_groups)} group(s) stay undecided")
            return {c for cs in cells.values() for c in cs}
        return {c for g, cs in cells.items() if g not in open_groups for c in cs}
