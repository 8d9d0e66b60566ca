"""The A/B gate's exit code (``specbench ab``; issue 36), from an A/B result and the rules.

Exit 0: no regression. 1: a gated speed metric is *different* (B worse than A beyond the margin) in a
group or pooled over a method, or τ of B dropped below A's by more than ``tau_max_drop_pct`` (τ is
deterministic on CPU float32), or — with ``strict`` — something is still undecided. 3: nothing was
measured (no round paired A and B). Bad input (exit 2) never gets here.
"""

from __future__ import annotations

from typing import NamedTuple

from specbench.analysis.ab_rounds import ABResult
from specbench.regression.gate_rules import ABGateRules


class ABGateOutcome(NamedTuple):
    exit_code: int
    failures: list[str]  # why it fails (empty: passes)
    notes: list[str]  # what the summary must say plainly (undecided at the end of the budget)


def ab_outcome(result: ABResult, rules: ABGateRules, *, strict: bool = False) -> ABGateOutcome:
    if not result.groups:
        return ABGateOutcome(3, ["nothing measured: no round ran in both arms"], [])
    failures = [f"{where}: {v.describe()}" for where, v in result.regressions]
    for g in result.exact:
        if g.tau_a is not None and g.tau_b is not None and g.tau_b < g.tau_a * (1 - rules.tau_max_drop_pct / 100):
            failures.append(f"{g.group}: τ B {g.tau_b:.4f} < A {g.tau_a:.4f} (allowed drop {rules.tau_max_drop_pct:g} %)")
    notes = []
    undecided = result.undecided
    if undecided:
        unit = "engine instances" if result.instances > 1 else "rounds"
        why = "the time budget ended" if result.budget_ended else f"the suite's cap of {unit} ({result.rule.max_rounds})"
        notes.append(f"{len(undecided)} verdict(s) undecided at the end ({why}): "
                     + "; ".join(f"{w} {v.metric}" for w, v in undecided[:6]) + (" …" if len(undecided) > 6 else ""))
        if strict:
            failures.append(f"--strict: {len(undecided)} verdict(s) undecided")
    return ABGateOutcome(1 if failures else 0, failures, notes)
