"""Acceptance along the output walked again by hand, beside :mod:`specbench.analysis.acceptance_along_output`
(issue 52): the check that the stored buckets are what the records give."""

from __future__ import annotations

from collections.abc import Iterable

from specbench.results.records import RequestRecord


def walked_buckets(records: Iterable[RequestRecord], bucket_tokens: int = 32) -> dict[int, tuple[int, int, int, int]]:
    """Bucket index → (Σ accepted, Σ drafted, drafting steps, requests) over the successful requests whose trace
    lists every step: the prefill emits output position 0, each step accepted + 1 tokens, and a drafting step
    falls in the bucket of the position of its first drafted token."""
    out: dict[int, list[int]] = {}
    for r in records:
        if r.steps is None or not r.steps.complete or r.error is not None:
            continue
        pos, seen = 1, set()
        for drafted, accepted in zip(r.steps.drafted, r.steps.accepted, strict=True):
            if drafted:
                b = pos // bucket_tokens
                row = out.setdefault(b, [0, 0, 0, 0])
                row[0] += accepted
                row[1] += drafted
                row[2] += 1
                row[3] += b not in seen
                seen.add(b)
            pos += accepted + 1
    return {b: (a, d, s, n) for b, (a, d, s, n) in sorted(out.items())}
