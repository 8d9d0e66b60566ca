"""A request's verification steps from vLLM's per-request metrics, and the ngram replay.

vLLM's per-request spec-decode metrics (``per_request_spec_decode_metrics:
detailed``) list the accepted and proposed draft counts of every step that
*drafted*. For a method that always drafts (every model drafter) that is every
verification step. A method that may skip drafting (ngram, suffix) also has
steps without a draft, which vLLM does not record: for ngram they are
recovered by replaying vLLM's own proposer function over the request's prompt
and output (:func:`replay_ngram`; deterministic at any temperature, since the
proposer only looks at the tokens), checked against every drafted step vLLM
recorded. Where the replay is not possible or disagrees, the trace stays
incomplete and the analysis reports bounds (:mod:`specbench.analysis.step_accounting`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specbench.results.records import StepTrace

#: vLLM methods whose proposer may return no draft at a step (vLLM then records no step).
MAY_SKIP_DRAFTING = frozenset({"ngram", "ngram_gpu", "suffix"})

Propose = Callable[[Sequence[int]], Sequence[int]]  # context token ids → draft tokens (possibly none)


def trace_from_vllm(sd: Any, method: str | None) -> StepTrace | None:
    """The drafted steps vLLM recorded (``RequestSpecDecodeMetrics`` or its response dict); complete
    when the method always drafts. None without per-step arrays (a level below ``detailed``)."""
    if sd is None:
        return None
    get = sd.get if isinstance(sd, dict) else (lambda key, default=None: getattr(sd, key, default))
    accepted, drafted = get("per_step_accepted"), get("per_step_drafted")
    counted = sum(get("acceptance_histogram", None) or get("histogram", None) or [])
    if accepted is None and drafted is None and counted == 0:
        accepted, drafted = [], []  # a response leaves the arrays out when no step drafted
    if accepted is None or drafted is None or len(accepted) != len(drafted):
        return None
    if len(accepted) != counted:
        return None  # steps counted but not listed: not the detailed level
    return StepTrace(drafted=[int(d) for d in drafted], accepted=[int(a) for a in accepted],
                     complete=method not in MAY_SKIP_DRAFTING, source="vllm")


def replay_ngram(prompt_ids: Sequence[int], output_ids: Sequence[int], vllm_steps: StepTrace,
                 propose: Propose) -> StepTrace | None:
    """Every verification step of an ngram request: vLLM's drafted steps with the steps without a
    draft put back where the proposer found no match. None when the replay disagrees with vLLM
    (a proposal's length or its accepted tokens differ, or the drafted steps do not line up).

    The proposer runs after each step on the prompt and the output so far, as in vLLM: the first
    decoding step follows the prefill's token.
    """
    ctx = list(prompt_ids) + list(output_ids)
    n_prompt, n_out = len(prompt_ids), len(output_ids)
    drafted: list[int] = []
    accepted: list[int] = []
    emitted, i = 1, 0
    while emitted < n_out:
        proposal = list(propose(ctx[: n_prompt + emitted]))
        if not proposal:
            drafted.append(0)
            accepted.append(0)
            emitted += 1
            continue
        if i >= len(vllm_steps.drafted) or vllm_steps.drafted[i] != len(proposal):
            return None
        a = vllm_steps.accepted[i]
        kept = ctx[n_prompt + emitted: n_prompt + emitted + a]
        if proposal[: len(kept)] != kept:
            return None
        drafted.append(len(proposal))
        accepted.append(a)
        emitted += a + 1
        i += 1
    if i != len(vllm_steps.drafted):
        return None
    return StepTrace(drafted=drafted, accepted=accepted, complete=True, source="vllm+ngram-replay")


def vllm_ngram_proposer(min_n: int, max_n: int, k: int, max_model_len: int) -> Propose:
    """vLLM's own ngram proposal function (the one its ``NgramProposer`` runs per request)."""
    import numpy as np
    from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens as find

    def propose(context: Sequence[int]) -> list[int]:
        return [int(t) for t in find(np.asarray(context, dtype=np.int32), min_n, max_n, max_model_len, k)]

    return propose
