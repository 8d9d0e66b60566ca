"""Acceptance along the output: does a drafter's acceptance drift as a generation grows? (pure; issue 52)

From each request's step trace (:class:`~specbench.results.records.StepTrace`: per verification step, in order,
the draft tokens verified and how many were accepted) the output position of each step's first drafted token
is found by walking the trace: the prefill emits output position 0, and step i emits accepted[i] + 1 tokens,
so step i drafts from position 1 + Σ_{j<i} (accepted[j] + 1) on. Steps are put in buckets of
:data:`BUCKET_TOKENS` output positions by that first drafted position; per bucket the rate is Σ accepted /
Σ drafted over the group's drafting steps in it, pooled, with a 95 % bootstrap over requests
(:func:`specbench.stats.proportion_ci`: Wilson over the draft tokens when every request accepted all or none
of them), n: requests (steps beside it). The last step may draft past the output's end (past EOS or
max_tokens): its drafts count as vLLM counts them (the terminal overcount; docs/metrics.md).

Only traces that list every step are walked: one that lists only the drafting steps (a method that may skip
drafting, e.g. ngram on a server, whose skipped steps could not be replayed) does not say where a step falls
in the output, so its request is left out and counted (``incomplete``). Failed requests are left out.

On the CPU zoo (``model: tiny``) the target and its drafters were trained on sequences of
:func:`zoo_trained_tokens` tokens; each group says from which output position its requests' prompt and output
pass that length: acceptance past it shows the zoo's training, not a drafter's drift.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

from specbench import stats
from specbench.results.output_acceptance import OutputAcceptance, OutputBucket
from specbench.results.records import RequestRecord, StepTrace
from specbench.results.summary import GroupSummary

#: Output positions per bucket.
BUCKET_TOKENS = 32


def zoo_trained_tokens() -> int:
    """The zoo's training sequence length: its target's training windows and its drafters' documents (a
    32-token prompt and the target's continuation), both this many tokens (:func:`specbench.zoo.train_config`)."""
    from specbench.zoo import train_config

    cfg = train_config()
    return int(max(cfg["target"]["seq_len"], cfg["drafters"]["doc_len"]))


def first_draft_positions(trace: StepTrace) -> list[int]:
    """The output position of each step's first drafted token (0-based; the prefill emits position 0)."""
    out, pos = [], 1
    for acc in trace.accepted:
        out.append(pos)
        pos += acc + 1
    return out


def request_buckets(trace: StepTrace, bucket_tokens: int = BUCKET_TOKENS) -> dict[int, tuple[int, int, int]]:
    """``{bucket index: (accepted, drafted, drafting steps)}`` of one complete trace."""
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pos, drafted, accepted in zip(first_draft_positions(trace), trace.drafted, trace.accepted, strict=True):
        if drafted > 0:
            row = out[pos // bucket_tokens]
            row[0] += accepted
            row[1] += drafted
            row[2] += 1
    return {b: (a, d, s) for b, (a, d, s) in sorted(out.items())}


def output_acceptance(g: GroupSummary, records: Sequence[RequestRecord], *, bucket_tokens: int = BUCKET_TOKENS,
                      trained_tokens: int | None = None) -> OutputAcceptance | None:
    """The group's acceptance rate by output-position bucket (see the module); None when no successful request
    has a trace, or when the traces are complete and none drafted (K = 0: nothing to show)."""
    traced = [r for r in records if r.error is None and r.steps is not None]
    if not traced:
        return None
    used = [r for r in traced if r.steps is not None and r.steps.complete]
    per_request = [request_buckets(r.steps, bucket_tokens) for r in used if r.steps is not None]
    buckets = []
    for b in sorted({b for rb in per_request for b in rb}):
        rows = [rb[b] for rb in per_request if b in rb]
        buckets.append(OutputBucket(
            start=b * bucket_tokens, end=(b + 1) * bucket_tokens,
            rate=stats.proportion_ci([a for a, _, _ in rows], [d for _, d, _ in rows]),
            steps=sum(s for _, _, s in rows), requests=len(rows), accepted=sum(a for a, _, _ in rows),
            drafted=sum(d for _, d, _ in rows)))
    if not buckets and len(used) == len(traced):
        return None
    room = [max(0, trained_tokens - r.prompt_tokens) for r in used] if trained_tokens is not None else []
    return OutputAcceptance(
        group_id=g.group_id, target=g.target, method=g.method, method_kind=g.method_kind, k=g.k, dataset=g.dataset,
        temperature=g.temperature, batch_size=g.batch_size, request_rate=g.request_rate, bucket_tokens=bucket_tokens,
        buckets=buckets, requests=len(used), incomplete=len(traced) - len(used), trained_tokens=trained_tokens,
        past_training_from=min(room) if room else None, past_training_all=max(room) if room else None)


def acceptance_along_output(groups: Sequence[GroupSummary], records: Mapping[str, Sequence[RequestRecord]],
                            zoo_targets: Collection[str] = ()) -> list[OutputAcceptance]:
    """Every speculative group's :func:`output_acceptance` (``records``: group id → its requests; ``zoo_targets``:
    the targets served by the CPU zoo, whose training length each of their groups states)."""
    trained = zoo_trained_tokens() if zoo_targets else None
    out = []
    for g in groups:
        if g.method_kind == "baseline":
            continue
        row = output_acceptance(g, records.get(g.group_id, []),
                                trained_tokens=trained if g.target in zoo_targets else None)
        if row is not None:
            out.append(row)
    return out
