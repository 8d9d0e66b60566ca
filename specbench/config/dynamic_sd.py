"""vLLM's dynamic speculative decoding schedule, read by vLLM's own rules (pure; issue 37).

``speculative_config.num_speculative_tokens_per_batch_size: [[lo, hi, K], ...]`` makes vLLM's
scheduler pick K from the number of requests scheduled in each step (prefills included):
inclusive batch-size ranges, sorted by vLLM, each mapped to a K (0: no drafts in that step).
vLLM (``vllm/v1/spec_decode/dynamic/utils.py``, 0.31–0.32) *refuses* a schedule whose entries
are not 3-item sequences, whose bounds are not positive or start after they end, whose K is
negative, whose ranges overlap, or whose first range does not start at 1; it *silently changes*
one whose K exceeds ``num_speculative_tokens`` (clamped to it) or whose ranges pass
``max_num_seqs`` (truncated). A batch size in a gap between ranges, and every one past the
last range, inherits the K of the range before it.

:func:`validate_schedule` lists both kinds as problems (a suite refuses what vLLM would refuse
or quietly change); :func:`expand_schedule` is vLLM's dense lookup (batch size → K), gap
inheritance and clamping included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Schedule = list[tuple[int, int, int]]


def _entries(schedule: Any) -> tuple[Schedule, list[str]]:
    """The entries as ``(lo, hi, K)`` triples, and the problems that stop reading them."""
    if not isinstance(schedule, (list, tuple)) or not schedule:
        return [], ["num_speculative_tokens_per_batch_size must be a non-empty list of [lo, hi, K] entries"]
    out: Schedule = []
    problems: list[str] = []
    for i, entry in enumerate(schedule):
        if (not isinstance(entry, (list, tuple)) or len(entry) != 3
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in entry)):
            problems.append(f"entry {i + 1} ({entry!r}) is not [lo, hi, K] of three integers")
            continue
        out.append((int(entry[0]), int(entry[1]), int(entry[2])))
    return out, problems


def validate_schedule(schedule: Any, num_speculative_tokens: int | None = None,
                      max_num_seqs: int | None = None) -> list[str]:
    """Every problem vLLM would refuse or silently change, as sentences (empty: vLLM runs it as written).

    ``num_speculative_tokens``: the method's K (vLLM clamps a larger scheduled K to it);
    ``max_num_seqs``: the engine's batch-size limit (vLLM ignores ranges past it). Either left
    out skips its check.
    """
    entries, problems = _entries(schedule)
    for lo, hi, k in entries:
        if lo <= 0 or hi <= 0:
            problems.append(f"range [{lo}, {hi}] must be positive")
        elif lo > hi:
            problems.append(f"range [{lo}, {hi}] starts after it ends")
        if k < 0:
            problems.append(f"range [{lo}, {hi}]: K = {k} is negative")
        elif num_speculative_tokens is not None and k > num_speculative_tokens:
            problems.append(f"range [{lo}, {hi}]: K = {k} is above num_speculative_tokens = "
                            f"{num_speculative_tokens} (vLLM would clamp it to {num_speculative_tokens})")
        if max_num_seqs is not None and hi > max_num_seqs:
            problems.append(f"range [{lo}, {hi}] passes max_num_seqs = {max_num_seqs} "
                            f"(vLLM would truncate it{'' if lo <= max_num_seqs else ' away'})")
    ordered = sorted(entries, key=lambda e: e[0])
    for (lo0, hi0, _), (lo1, hi1, _) in zip(ordered, ordered[1:], strict=False):
        if lo1 <= hi0:
            problems.append(f"ranges [{lo0}, {hi0}] and [{lo1}, {hi1}] overlap")
    if ordered and ordered[0][0] != 1:
        problems.append(f"the first range starts at {ordered[0][0]}, not 1 (vLLM needs every batch size covered)")
    return problems


def drafts_nothing(schedule: Sequence[Sequence[int]] | None) -> bool:
    """A schedule of K = 0 at every batch size: the drafter loaded, no drafts (None: no schedule)."""
    return schedule is not None and all(e[2] == 0 for e in schedule)


def expand_schedule(schedule: Sequence[Sequence[int]], max_num_seqs: int, num_speculative_tokens: int) -> list[int]:
    """vLLM's dense lookup: index ``b`` (1..max_num_seqs) holds the K a step of ``b`` requests gets
    (index 0 unused). A gap inherits the previous range's K, the tail the last range's; every K is
    clamped to ``num_speculative_tokens``. Raises ``ValueError`` on a schedule vLLM refuses."""
    entries, problems = _entries(list(schedule))
    refused = [p for p in problems + validate_schedule(entries) if "clamp" not in p and "truncate" not in p]
    if refused:
        raise ValueError("; ".join(refused))
    dense = [0] * (max_num_seqs + 1)
    nxt, last = 1, None
    for lo, hi, k in sorted(entries, key=lambda e: e[0]):
        if lo > nxt and last is not None:
            for b in range(nxt, min(lo, max_num_seqs + 1)):
                dense[b] = min(num_speculative_tokens, last)
        for b in range(max(lo, nxt), min(hi, max_num_seqs) + 1):
            dense[b] = min(num_speculative_tokens, k)
        nxt, last = max(nxt, hi + 1), k
        if nxt > max_num_seqs:
            break
    for b in range(nxt, max_num_seqs + 1):
        dense[b] = min(num_speculative_tokens, last if last is not None else 0)
    return dense
