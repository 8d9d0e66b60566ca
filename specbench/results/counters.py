"""vLLM's spec-decode counters: one parser per source, and the numbers computed from them, once.

vLLM counts, per engine: ``vllm:spec_decode_num_drafts`` (verification steps that
had drafts), ``…_num_draft_tokens`` (draft tokens proposed),
``…_num_accepted_tokens`` and ``…_num_accepted_tokens_per_pos`` (by draft
position). specbench reads them from three sources, each with its one parser:

* :func:`from_prometheus` — a server's ``/metrics`` text (``_total`` suffix,
  label ``position``; samples summed over every other label);
* :func:`from_offline` — an offline engine's ``LLM.get_metrics()`` (a Counter
  per family, a Vector of per-position values);
* :func:`from_request` — one request's acceptance histogram (the offline
  ``RequestSpecDecodeMetrics`` and a server response's
  ``metrics.speculative_decoding`` both carry it).

Both aggregate sources are cumulative over the engine's life: a cell keeps the
delta of two reads (``after - before``).

What is computed from counters is written here and nowhere else:
:func:`tau` (vLLM's mean acceptance length ``1 + accepted / drafts``, counting
the bonus token; scalars or numpy arrays), :func:`counters_tau` (of a
:class:`SpecCounters`, ``None`` without drafts), :func:`position_rate` /
:func:`per_position_rates` (accepted at position i per draft),
:func:`draft_acceptance_rate` (accepted per draft token) and
:func:`drafted_per_step` (draft tokens per drafting step). Callers use them as
``counters.tau(...)`` so that one patch of this module reaches every number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specbench.results.records import SpecCounters

SPEC = "vllm:spec_decode_"
DRAFTS = SPEC + "num_drafts"
DRAFT_TOKENS = SPEC + "num_draft_tokens"
ACCEPTED = SPEC + "num_accepted_tokens"
PER_POS = SPEC + "num_accepted_tokens_per_pos"


# -- what is computed from counters ---------------------------------------------------------------


def tau(accepted: Any, drafts: Any) -> Any:
    """vLLM's mean acceptance length τ = 1 + accepted / drafts (per drafting step, bonus token counted).

    ``accepted`` and ``drafts`` may be numbers or numpy arrays (the caller keeps drafts > 0, or masks
    the result). An interval's bound on accepted-per-draft ``r`` is ``tau(r, 1)``.
    """
    return 1 + accepted / drafts


def counters_tau(c: SpecCounters | None) -> float | None:
    """Pooled τ of ``c`` (``None`` without counters or drafts)."""
    if c is None or c.num_drafts <= 0:
        return None
    return float(tau(c.num_accepted_tokens, c.num_drafts))


def position_rate(c: SpecCounters, i: int) -> float | None:
    """Acceptance at draft position ``i`` (0-based): accepted_i / drafts (``None`` without drafts)."""
    if c.num_drafts <= 0:
        return None
    return (c.accepted_per_pos[i] if i < len(c.accepted_per_pos) else 0) / c.num_drafts


def per_position_rates(c: SpecCounters, width: int | None = None) -> list[float]:
    """Acceptance at each draft position (``width`` positions, default the counters'); 0 without drafts."""
    n = len(c.accepted_per_pos) if width is None else width
    return [position_rate(c, i) or 0.0 for i in range(n)]


def draft_acceptance_rate(c: SpecCounters) -> float | None:
    """Accepted draft tokens / draft tokens (``None`` without draft tokens)."""
    return c.num_accepted_tokens / c.num_draft_tokens if c.num_draft_tokens > 0 else None


def drafted_per_step(c: SpecCounters) -> float | None:
    """Draft tokens sent to the target per drafting step (``None`` without drafts)."""
    return c.num_draft_tokens / c.num_drafts if c.num_drafts > 0 else None


# -- one parser per source ----------------------------------------------------------------------


class _Sum:
    """Sums samples of the spec-decode families, whatever other labels split them."""

    def __init__(self) -> None:
        self.found = False
        self.drafts = self.draft_tokens = self.accepted = 0.0
        self.per_pos: dict[int, float] = {}

    def add(self, name: str, value: float, position: int | None = None) -> None:
        """One sample of family ``name`` (``_total`` already removed); ``position`` for per-position ones."""
        if name == DRAFTS:
            self.drafts += value
        elif name == DRAFT_TOKENS:
            self.draft_tokens += value
        elif name == ACCEPTED:
            self.accepted += value
        elif name == PER_POS and position is not None:
            self.per_pos[position] = self.per_pos.get(position, 0.0) + value
        else:
            return
        self.found = True

    def counters(self) -> SpecCounters:
        width = max(self.per_pos) + 1 if self.per_pos else 0
        return SpecCounters(num_drafts=int(round(self.drafts)), num_draft_tokens=int(round(self.draft_tokens)),
                            num_accepted_tokens=int(round(self.accepted)),
                            accepted_per_pos=[int(round(self.per_pos.get(i, 0.0))) for i in range(width)])


def from_prometheus(text: str, totals_of: Sequence[str] = ()) -> tuple[SpecCounters | None, dict[str, float]]:
    """A ``/metrics`` scrape's spec-decode counters (``None`` when the server exports none: no speculation)
    and the sums of the other counter families named in ``totals_of`` (without ``_total``)."""
    from prometheus_client.parser import text_string_to_metric_families

    acc = _Sum()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            name = s.name.removesuffix("_total")
            if name.startswith(SPEC):
                pos = s.labels.get("position")
                acc.add(name, s.value, None if pos is None else int(pos))
            elif name in totals_of:
                totals[name] = totals.get(name, 0.0) + s.value
    return (acc.counters() if acc.found else None), totals


def from_offline(metrics: Iterable[Any]) -> SpecCounters:
    """An offline engine's ``LLM.get_metrics()`` (Counters with ``value``, the per-position Vector with
    ``values``) as counters; all zero when the engine does not speculate."""
    acc = _Sum()
    for m in metrics:
        name = m.name.removesuffix("_total")
        if name == PER_POS:
            for i, v in enumerate(m.values):
                acc.add(name, v, i)
        elif name.startswith(SPEC):
            acc.add(name, m.value)
    return acc.counters()


def from_request(histogram: Sequence[int], num_draft_tokens: int, k: int | None) -> SpecCounters:
    """One request's counters from its acceptance histogram (``histogram[j]``: drafting steps that
    accepted exactly ``j`` drafts).

    Chain acceptance: a step that accepted ``j`` drafts accepted positions ``0..j-1``, so position ``i``
    counts the steps with ``j > i``; ``k`` (at least) positions are listed.
    """
    hist = [int(h) for h in histogram]
    width = max(k or 0, len(hist) - 1)
    return SpecCounters(
        num_drafts=sum(hist),
        num_draft_tokens=int(num_draft_tokens),
        num_accepted_tokens=sum(j * c for j, c in enumerate(hist)),
        accepted_per_pos=[sum(hist[j] for j in range(i + 1, len(hist))) for i in range(width)],
    )


def from_response(sd: Mapping[str, Any] | None, k: int | None) -> SpecCounters | None:
    """A server response's ``metrics.speculative_decoding`` (``None`` without its histogram)."""
    if not sd or "acceptance_histogram" not in sd:
        return None
    return from_request(sd["acceptance_histogram"], sd.get("num_draft_tokens", 0),
                        k if k is not None else sd.get("num_spec_tokens"))
