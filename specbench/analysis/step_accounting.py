"""Tokens per target forward pass, the terminal overcount and the draft rate (pure).

vLLM's τ = 1 + accepted / drafts counts, per *drafting* step, the tokens the
target accepted plus its bonus token. Tokens a request commits per target
forward pass differ in two ways:

* the last step of a request accepts drafts past EOS or max_tokens that are
  never emitted (vLLM issue 56101): they count in τ, not in the output;
* a step where the proposer drafted nothing (ngram, suffix) is a target
  forward pass but not a draft: τ skips it.

For one request with ``n`` output tokens and its :class:`StepTrace`:

* committed = n − 1 (the prefill's forward pass and its first token are left
  out, as τ leaves them out);
* steps = verification steps, with or without a draft;
* counted = Σ over drafting steps of (accepted + 1): the tokens τ counts;
* emitted = counted + steps without a draft; overcount = emitted − committed,
  the tokens past the end, all in the last step (0 ≤ overcount ≤ the last
  step's accepted drafts, else the trace does not fit the output).

A trace listing only the drafting steps (vLLM's record of a method that may
skip drafting, not replayed) leaves the steps without a draft unknown within
``[committed − counted + overcount]`` for overcount in its range: the request
gets bounds, never an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from specbench import stats
from specbench.results.records import RequestRecord, StepTrace
from specbench.stats import Estimate


@dataclass(frozen=True)
class RequestSteps:
    """One request's step arithmetic; ``steps`` and ``overcount`` are (low, high), equal when exact."""

    committed: int
    drafting: int
    counted: int
    steps: tuple[int, int]
    overcount: tuple[int, int]
    fits: bool  # the trace agrees with the output length (a complete trace that does not is read as incomplete)
    all_drafted: bool  # complete by construction: every step drafted (a method that always drafts)

    @property
    def exact(self) -> bool:
        return self.steps[0] == self.steps[1]


def request_steps(num_output_tokens: int, trace: StepTrace) -> RequestSteps | None:
    """The step arithmetic of one request (None without output)."""
    if num_output_tokens < 1:
        return None
    committed = num_output_tokens - 1
    pairs = [(d, a) for d, a in zip(trace.drafted, trace.accepted, strict=True)]
    drafting = [(d, a) for d, a in pairs if d > 0]
    counted = sum(a + 1 for _, a in drafting)
    if trace.complete:
        undrafted = len(pairs) - len(drafting)
        over = counted + undrafted - committed
        cap = pairs[-1][1] if pairs and pairs[-1][0] > 0 else 0
        if 0 <= over <= cap:
            return RequestSteps(committed, len(drafting), counted, (len(pairs), len(pairs)), (over, over), True,
                                all_drafted=undrafted == 0 and trace.source != "vllm+ngram-replay")
    # Only the drafting steps are known (or a complete trace does not fit): bound the rest.
    last = drafting[-1][1] if drafting else 0
    lo_over = max(0, counted - committed)
    fits = lo_over <= last
    hi_over = max(lo_over, last)
    base = len(drafting) + committed - counted
    return RequestSteps(committed, len(drafting), counted, (base + lo_over, base + hi_over), (lo_over, hi_over),
                        fits and not trace.complete, all_drafted=False)


def _bounds(lo: float, hi: float, n: int) -> Estimate:
    """Labelled bounds: no value, the interval is the range the records allow (not a confidence interval)."""
    return Estimate(value=None, ci_low=lo, ci_high=hi, n=n, method="bounds")


class StepMetrics(NamedTuple):
    """A group's numbers from its requests' step traces (the :class:`GroupSummary` fields of the same names)."""

    tokens_per_step: Estimate
    tokens_per_step_per_request: Estimate
    terminal_overcount: Estimate
    draft_rate: Estimate


def step_metrics(requests: Sequence[RequestRecord]) -> StepMetrics | None:
    """``tokens_per_step`` (pooled), ``tokens_per_step_per_request``, ``terminal_overcount`` and
    ``draft_rate`` of a group's requests; None unless every successful request has a step trace.

    Bootstrap over requests; a share whose outcomes are all equal gets a Wilson interval
    (:func:`specbench.stats.proportion_ci`); a draft rate of 1 by construction (every step of
    every request drafted, a method that always drafts) is exact. When any request's steps are
    only bounded, each metric is reported as bounds (``method == "bounds"``, no value).
    """
    ok = [r for r in requests if r.error is None]
    if not ok or any(r.steps is None for r in ok):
        return None
    rows = [s for r in ok if r.steps is not None and (s := request_steps(r.num_output_tokens, r.steps)) is not None]
    rows = [s for s in rows if s.steps[1] > 0]
    if not rows:
        return None
    n = len(rows)
    committed = [float(s.committed) for s in rows]
    counted = [float(s.counted) for s in rows]
    drafting = [float(s.drafting) for s in rows]
    if all(s.exact for s in rows):
        steps = [float(s.steps[0]) for s in rows]
        over = [float(s.overcount[0]) for s in rows]
        if all(s.all_drafted for s in rows):
            rate = Estimate(value=1.0, ci_low=1.0, ci_high=1.0, n=n, method="exact")
        else:
            rate = stats.proportion_ci(drafting, steps)
        return StepMetrics(
            tokens_per_step=stats.ratio_ci(committed, steps),
            tokens_per_step_per_request=stats.mean_ci([c / s for c, s in zip(committed, steps, strict=True)]),
            terminal_overcount=stats.proportion_ci(over, counted),
            draft_rate=rate,
        )
    lo_steps = sum(s.steps[0] for s in rows)
    hi_steps = sum(s.steps[1] for s in rows)
    total_committed, total_counted, total_drafting = sum(committed), sum(counted), sum(drafting)
    per_req_lo = sum(s.committed / s.steps[1] for s in rows) / n
    per_req_hi = sum(s.committed / max(1, s.steps[0]) for s in rows) / n
    return StepMetrics(
        tokens_per_step=_bounds(total_committed / hi_steps, total_committed / max(1, lo_steps), n),
        tokens_per_step_per_request=_bounds(per_req_lo, per_req_hi, n),
        terminal_overcount=_bounds(sum(s.overcount[0] for s in rows) / max(1.0, total_counted),
                                   sum(s.overcount[1] for s in rows) / max(1.0, total_counted), n),
        draft_rate=_bounds(total_drafting / hi_steps, total_drafting / max(1, lo_steps), n),
    )


def trace_note(requests: Sequence[RequestRecord]) -> str | None:
    """How the group's steps are known, when that is not the plain case (every step recorded and fitting)."""
    traces = [r.steps for r in requests if r.error is None and r.steps is not None]
    if not traces:
        return None
    rows = [request_steps(r.num_output_tokens, r.steps) for r in requests if r.error is None and r.steps is not None]
    misfit = sum(1 for s in rows if s is not None and not s.fits)
    bounded = sum(1 for s in rows if s is not None and not s.exact)
    notes = []
    if any(t.source == "vllm+ngram-replay" for t in traces):
        notes.append("steps without a draft recovered by replaying vLLM's ngram proposer over each request")
    if bounded:
        notes.append(f"{bounded} of {len(rows)} requests list only the steps that drafted: bounds, not estimates")
    if misfit:
        notes.append(f"{misfit} requests' step records do not fit their output length")
    return "; ".join(notes) or None
