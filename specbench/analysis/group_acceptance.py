"""A group's acceptance numbers from its pooled counters and its requests (pure).

* τ (mean acceptance length, :func:`specbench.results.counters.tau`), counting
  the bonus token, so 1 ≤ τ ≤ K+1. *Pooled* τ uses the engine's counters summed over
  the group (long completions weigh more); *per-request* τ is the mean of
  each request's own τ.
* per-position rate i = accepted_i / drafts.
* draft acceptance rate = accepted / draft tokens.

:func:`acceptance` computes them (:class:`Acceptance`); :func:`non_degenerate` the group's τ and tokens per
step on its requests whose output is not degenerate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from specbench import stats
from specbench.analysis import step_accounting
from specbench.results import counters as spec_counters
from specbench.results.degeneracy import is_degenerate
from specbench.results.parts import NonDegenerate
from specbench.results.records import RequestRecord, SpecCounters
from specbench.results.summary import GroupSummary
from specbench.stats import Estimate


class Acceptance(NamedTuple):
    """A group's acceptance (the :class:`GroupSummary` fields of the same names)."""

    tau: Estimate
    tau_per_request: Estimate
    per_position: list[Estimate]
    draft_acceptance_rate: Estimate


def sum_counters(items: Iterable[SpecCounters | None]) -> SpecCounters | None:
    """The counters summed (``None`` when none of them is given)."""
    total: SpecCounters | None = None
    for c in items:
        if c is None:
            continue
        total = c if total is None else total + c
    return total


def acceptance(counters: SpecCounters, requests: Sequence[RequestRecord], k: int | None) -> Acceptance:
    """τ (pooled and per request), per-position rates and draft acceptance rate.

    Values come from the engine's pooled ``counters``; intervals from a
    bootstrap over the requests' own counters when every request has them.
    """
    per_req = [r.spec for r in requests if r.error is None]
    have = bool(per_req) and all(s is not None for s in per_req)
    specs: list[SpecCounters] = [s for s in per_req if s is not None] if have else []
    width = max(k or 0, len(counters.accepted_per_pos))
    n = len(specs)

    def with_value(est: Estimate, value: float | None) -> Estimate:
        return est.model_copy(update={"value": value})

    if counters.num_drafts == 0:
        return Acceptance(tau=Estimate(value=None, n=n), tau_per_request=Estimate(value=None, n=n),
                          per_position=[Estimate(value=None, n=n) for _ in range(width)],
                          draft_acceptance_rate=Estimate(value=None, n=n))
    tau = spec_counters.counters_tau(counters)
    if not have:
        return Acceptance(
            tau=Estimate(value=tau, n=len(requests)), tau_per_request=Estimate(value=None, n=0),
            per_position=[Estimate(value=spec_counters.position_rate(counters, i), n=len(requests))
                          for i in range(width)],
            draft_acceptance_rate=Estimate(value=spec_counters.draft_acceptance_rate(counters) or 0.0,
                                           n=len(requests)))
    acc = np.array([s.num_accepted_tokens for s in specs], float)
    drafts = np.array([s.num_drafts for s in specs], float)
    dtoks = np.array([s.num_draft_tokens for s in specs], float)
    tau_est = with_value(stats.ratio_ci(acc, drafts), None)
    if tau_est.ci_low is not None and tau_est.ci_high is not None:
        # the interval of accepted per draft, as τ
        tau_est = tau_est.model_copy(update={"ci_low": spec_counters.tau(tau_est.ci_low, 1),
                                             "ci_high": spec_counters.tau(tau_est.ci_high, 1)})
    mask = drafts > 0
    pos = []
    for i in range(width):
        ai = np.array([s.accepted_per_pos[i] if i < len(s.accepted_per_pos) else 0 for s in specs], float)
        pos.append(with_value(stats.ratio_ci(ai, drafts), spec_counters.position_rate(counters, i)))
    return Acceptance(
        tau=with_value(tau_est, tau),
        tau_per_request=stats.mean_ci(list(spec_counters.tau(acc[mask], drafts[mask]))),
        per_position=pos,
        draft_acceptance_rate=with_value(stats.ratio_ci(acc, dtoks),
                                         spec_counters.draft_acceptance_rate(counters) or 0.0),
    )


def non_degenerate(g: GroupSummary, requests: Sequence[RequestRecord]) -> NonDegenerate:
    """τ and tokens per step of a speculative group on its requests whose output is not degenerate
    (:func:`specbench.results.degeneracy.is_degenerate`); with none of them degenerate, the group's own
    estimates (the same requests). τ needs every such request's own counters (else None, n those requests)."""
    ok = [r for r in requests if r.error is None]
    kept = [r for r in ok if not is_degenerate(r)]
    if len(kept) == len(ok):
        return NonDegenerate(tau=g.tau, tokens_per_step=g.tokens_per_step)
    tau = Estimate(value=None, n=len(kept))
    counters = sum_counters(r.spec for r in kept)
    if kept and counters is not None and all(r.spec is not None for r in kept):
        tau = acceptance(counters, kept, g.k).tau
    steps = step_accounting.step_metrics(kept)
    return NonDegenerate(tau=tau, tokens_per_step=steps.tokens_per_step if steps is not None else None)
