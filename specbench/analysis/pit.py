"""Randomized PIT values of teacher-forced tokens (pure: numpy, no engine, no I/O).

The statistics layer of the sampled equivalence check: the sampler's processed
distribution from raw logprobs (:func:`process_logprobs`), each observed
token's ``F(x-)`` and ``p(x)`` under it (:func:`pit_parts`, the parts stored
per token in ``equivalence.jsonl``), and the seeded randomized PIT values
rebuilt from those parts (:func:`pit_from_row`). The engine that scores the
tokens (:mod:`specbench.engines.vllm_offline`) and the run-level glue
(:mod:`specbench.execution.teacher_forcing`) both import it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from specbench.results.requests import ScoreRow


def process_logprobs(raw: np.ndarray, temperature: float, top_p: float = 1.0) -> np.ndarray:
    """The sampler's processed distribution from raw logprobs, as probabilities.

    ``raw`` is ``(n, V)`` raw logprobs (or logits: any per-row shift cancels).
    Mirrors vLLM's sampler: divide by the temperature, then top-p by
    descending probability (a token is kept when the mass of more likely
    tokens is below ``top_p``; the top token always), renormalised.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0 for sampled equivalence")
    z = np.asarray(raw, dtype=np.float64) / float(temperature)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    if top_p < 1.0:
        order = np.lexsort((np.broadcast_to(np.arange(p.shape[1]), p.shape), -p), axis=-1)
        sp = np.take_along_axis(p, order, axis=1)
        before = np.cumsum(sp, axis=1) - sp
        kept = np.where(before < top_p, sp, 0.0)
        kept[:, 0] = sp[:, 0]
        out = np.empty_like(p)
        np.put_along_axis(out, order, kept / kept.sum(axis=1, keepdims=True), axis=1)
        p = out
    return p


def pit_parts(probs: np.ndarray, tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``F(x-)`` and ``p(x)`` of each observed token under full distributions.

    Canonical order of :func:`specbench.analysis.lossless_sampled.pit_values_array` with
    ``order="probability"``: descending probability, ties by token id. With
    the whole vocabulary there is no tail bucket, so ``u = F(x-) + V p(x)``
    is exactly the randomized PIT.
    """
    p = np.asarray(probs, dtype=np.float64)
    tok = np.asarray(tokens, dtype=np.int64).reshape(-1)
    if p.ndim != 2 or p.shape[0] != tok.shape[0]:
        raise ValueError(f"shape mismatch: probs {p.shape}, tokens {tok.shape}")
    if (tok < 0).any() or (tok >= p.shape[1]).any():
        raise ValueError("token id outside the scored vocabulary")
    r = np.arange(tok.shape[0])
    px = p[r, tok]
    # Mass strictly before x: more likely tokens, plus equally likely ones with smaller ids.
    ids = np.arange(p.shape[1])[None, :]
    before = (p > px[:, None]) | ((p == px[:, None]) & (ids < tok[:, None]))
    f = np.where(before, p, 0.0).sum(axis=1)
    return np.clip(f, 0.0, 1.0), px


def pit_seed(cell_id: str, prompt_id: str, sample_index: int) -> int:
    """Seed of a request's PIT randomization (stable across processes)."""
    return zlib.crc32(f"{cell_id}|{prompt_id}|{sample_index}".encode())


def pit_from_row(row: ScoreRow) -> np.ndarray:
    """Randomized PIT values of one scored ``equivalence.jsonl`` row (seeded per request)."""
    key = row.request_key
    if not row.scored or key is None:
        raise ValueError("a PIT needs a scored row (f_minus and p of a request)")
    f = np.asarray(row.f_minus, dtype=np.float64)
    p = np.asarray(row.p, dtype=np.float64)
    rng = np.random.default_rng(pit_seed(*key))
    return np.clip(f + rng.random(f.shape[0]) * p, 0.0, 1.0)
