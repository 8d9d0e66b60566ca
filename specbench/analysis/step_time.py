"""Time per decoding step, TPOT and verification spent, from per-request records (pure).

For one request:

* decode time = latency − TTFT (everything after the first token);
* decoding steps = the target's forward passes after the prefill: the
  request's verification steps with or without a draft (its step trace,
  :mod:`specbench.analysis.step_accounting`) with speculation, or output tokens − 1
  without;
* time per step = decode time / steps — a parallel drafter's claim lives here:
  EAGLE-3 runs K drafter passes per step, P-EAGLE / DFlash / DSpark one;
* TPOT = decode time / (output tokens − 1), as ``vllm bench serve`` defines it.

Group values pool requests (Σ decode time / Σ steps: :func:`specbench.results.speed_estimators.step_time`
and :func:`~specbench.results.speed_estimators.tpot`) with a bootstrap over requests
(:func:`specbench.stats.ratio_ci`).
"""

from __future__ import annotations

from collections.abc import Sequence

from specbench import stats
from specbench.analysis.step_accounting import request_steps
from specbench.results import counters as spec_counters
from specbench.results import speed_estimators
from specbench.results.parts import VerificationSpent
from specbench.results.records import RequestRecord, SpecCounters
from specbench.stats import Estimate


def decode_time(r: RequestRecord) -> float | None:
    if r.error is not None or r.latency_s is None or r.ttft_s is None:
        return None
    d = r.latency_s - r.ttft_s
    return d if d > 0 else None


def decoding_steps(r: RequestRecord, speculative: bool) -> int | None:
    """Target forward passes after the prefill (``None`` when unknown).

    With speculation: the request's verification steps, with or without a draft, from its step
    trace (:func:`specbench.analysis.step_accounting.request_steps`; ``None`` when the trace only bounds
    them); a record written before step traces existed falls back to its drafts (``num_drafts``),
    which is every step only for a method that always drafts.
    """
    if speculative:
        if r.steps is not None:
            s = request_steps(r.num_output_tokens, r.steps)
            return s.steps[0] if s is not None and s.exact and s.steps[0] > 0 else None
        return r.spec.num_drafts if r.spec is not None and r.spec.num_drafts > 0 else None
    return r.num_output_tokens - 1 if r.num_output_tokens > 1 else None


def step_rows(requests: Sequence[RequestRecord], speculative: bool) -> list[tuple[RequestRecord, float, int]]:
    """``(record, decode time, steps)`` of every request that has both."""
    out = []
    for r in requests:
        d, s = decode_time(r), decoding_steps(r, speculative)
        if d is not None and s is not None:
            out.append((r, d, s))
    return out


def step_time_estimate(requests: Sequence[RequestRecord], speculative: bool) -> Estimate | None:
    """Σ decode time / Σ decoding steps (seconds per step)."""
    rows = step_rows(requests, speculative)
    if not rows:
        return None
    return stats.ratio_ci([d for _, d, _ in rows], [s for _, _, s in rows], estimator=speed_estimators.step_time)


def tpot_estimate(requests: Sequence[RequestRecord]) -> Estimate | None:
    """Σ decode time / Σ (output tokens − 1) (seconds per output token after the first)."""
    rows = step_rows(requests, speculative=False)
    if not rows:
        return None
    return stats.ratio_ci([d for _, d, _ in rows], [s for _, _, s in rows], [r.round for r, _, _ in rows],
                          estimator=speed_estimators.tpot)


def verification_spent(counters: SpecCounters, requests: Sequence[RequestRecord]) -> VerificationSpent | None:
    """Draft tokens verified per step, accepted per verified token, wasted per emitted token.

    From the requests' own counters (with intervals) when every request has
    them; else from the group's pooled ``counters`` (no interval).
    """
    if counters.num_drafts == 0:
        return None
    ok = [r for r in requests if r.error is None]
    specs = [r.spec for r in ok]
    if ok and all(s is not None for s in specs):
        sp = [s for s in specs if s is not None]
        drafted = [float(s.num_draft_tokens) for s in sp]
        accepted = [float(s.num_accepted_tokens) for s in sp]
        return VerificationSpent(
            drafted_per_step=stats.ratio_ci(drafted, [float(s.num_drafts) for s in sp]),
            accepted_per_verified=stats.ratio_ci(accepted, drafted),
            wasted_per_emitted=stats.ratio_ci([d - a for d, a in zip(drafted, accepted, strict=True)],
                                              [float(r.num_output_tokens) for r in ok]),
        )
    n, out_tokens = len(ok), sum(r.num_output_tokens for r in ok)
    c = counters
    return VerificationSpent(
        drafted_per_step=Estimate(value=spec_counters.drafted_per_step(c), n=n),
        accepted_per_verified=Estimate(value=spec_counters.draft_acceptance_rate(c), n=n),
        wasted_per_emitted=Estimate(value=(c.num_draft_tokens - c.num_accepted_tokens) / out_tokens if out_tokens
                                    else None, n=n),
    )
