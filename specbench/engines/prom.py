"""Spec-decode counters from a vLLM server's Prometheus ``/metrics``.

vLLM exports, per engine (labels ``engine``, ``model_name``):

* ``vllm:spec_decode_num_drafts_total`` — verify steps that had drafts;
* ``vllm:spec_decode_num_draft_tokens_total`` — draft tokens proposed;
* ``vllm:spec_decode_num_accepted_tokens_total`` — draft tokens accepted;
* ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``.

They are cumulative over the server's life, so a cell scrapes before and
after and keeps the delta. Samples are summed over every other label (data
parallel engines, several API server processes). The parsing and what is
computed from the counters (τ, per-position rates) live in
:mod:`specbench.results.counters`.
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass, field

from specbench.results import counters
from specbench.results.records import SpecCounters

# Other counters worth a delta per cell (cross-checks against the client's view).
OTHER_COUNTERS = (
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "vllm:request_success",
)


class CounterReset(ValueError):
    """A counter went backwards between two scrapes (the server restarted)."""


@dataclass
class PromSnapshot:
    """The counters of one ``/metrics`` scrape.

    ``spec`` is ``None`` when the server exports no spec-decode counters
    (speculation off).
    """

    spec: SpecCounters | None
    totals: dict[str, float] = field(default_factory=dict)

    def __sub__(self, before: PromSnapshot) -> PromSnapshot:
        return PromSnapshot(spec_delta(before.spec, self.spec), _totals_delta(before.totals, self.totals))


def parse_metrics(text: str) -> PromSnapshot:
    """Parse Prometheus exposition text into a :class:`PromSnapshot` (:func:`counters.from_prometheus`)."""
    return PromSnapshot(*counters.from_prometheus(text, OTHER_COUNTERS))


def parse_spec_counters(text: str) -> SpecCounters | None:
    """Just the spec-decode counters of a scrape (``None`` when absent)."""
    return parse_metrics(text).spec


def spec_delta(before: SpecCounters | None, after: SpecCounters | None) -> SpecCounters | None:
    """``after - before``; raises :class:`CounterReset` if any counter decreased."""
    if after is None:
        if before is not None:
            raise CounterReset("spec-decode counters disappeared between scrapes (server restarted?)")
        return None
    d = after - (before or SpecCounters())
    values = [d.num_drafts, d.num_draft_tokens, d.num_accepted_tokens, *d.accepted_per_pos]
    if any(v < 0 for v in values):
        raise CounterReset(f"spec-decode counters went backwards between scrapes (server restarted?): {d}")
    return d


def _totals_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0.0)
        if d < 0:
            raise CounterReset(f"{k} went backwards between scrapes (server restarted?)")
        out[k] = d
    return out


def served_mismatch(k: int | None, before: PromSnapshot, after: PromSnapshot) -> str | None:
    """How a server's counters contradict a claim of K draft tokens (``None``: baseline), or ``None``.

    vLLM exports the spec-decode families only when it speculates, with one
    ``position`` label per draft token (K of them) from start-up; every draft
    proposes at most K tokens (exactly K for model drafters). ``before`` and
    ``after`` are scrapes around a cell that ran requests.
    """
    spec = after.spec
    drafted = spec_delta(before.spec, spec) if spec is not None else None
    width = len(spec.accepted_per_pos) if spec is not None else 0
    if k is None:
        if spec is None:
            return None
        did = f"; {drafted.num_drafts} drafts during the cell" if drafted is not None else ""
        return f"the suite claims no speculation (baseline), the server speculates (K={width} draft positions{did})"
    if spec is None:
        return f"the suite claims speculation with K={k}, the server exports no spec-decode counters (no speculation)"
    if width and width != k:
        return f"the suite claims K={k}, the server's per-position counters show K={width}"
    assert drafted is not None
    per_draft = counters.drafted_per_step(drafted)
    if per_draft is None:
        return f"the suite claims speculation with K={k}, the server proposed no drafts during the cell"
    if per_draft > k or (not width and per_draft <= k - 1):
        return f"the suite claims K={k}, the server proposed {per_draft:.2f} draft tokens per draft"
    return None


# ---------------------------------------------------------------------------
# scraping


def scrape_text(base_url: str, timeout_s: float = 10.0) -> str:
    """``GET {base_url}/metrics`` (blocking)."""
    with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as r:  # noqa: S310
        return r.read().decode("utf-8", "replace")


async def scrape(session, base_url: str, timeout_s: float = 10.0) -> PromSnapshot:  # noqa: ANN001 - aiohttp session
    """``GET {base_url}/metrics`` and parse it (async, aiohttp)."""
    import aiohttp

    async with session.get(
        base_url.rstrip("/") + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)
    ) as r:
        r.raise_for_status()
        return parse_metrics(await r.text())


async def scrape_settled(
    session,
    base_url: str,
    *,
    interval_s: float = 0.05,
    max_wait_s: float = 2.0,  # noqa: ANN001
) -> PromSnapshot:
    """Scrape until two consecutive reads agree (or ``max_wait_s`` passes).

    vLLM updates its counters from the engine's stats as it processes each
    step's outputs; the last step of a cell may land a moment after the
    client saw its final chunk.
    """
    snap = await scrape(session, base_url)
    waited = 0.0
    while waited < max_wait_s:
        await asyncio.sleep(interval_s)
        waited += interval_s
        nxt = await scrape(session, base_url)
        if nxt == snap:
            return nxt
        snap = nxt
    return snap
