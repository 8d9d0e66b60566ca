"""The HTTP streaming client of the load generator: one request to an OpenAI-compatible server,
streamed (SSE over aiohttp), and what the client saw of it (:class:`RequestResult`), timed per token.
The schedule that decides when each request is sent is :mod:`specbench.engines.loadgen`.

Counting tokens, not chunks
---------------------------
Under speculative decoding one SSE chunk can carry several tokens (all those
accepted in one verify step), and a slow client makes vLLM merge deltas too.
Requests ask for ``"return_token_ids": true``, so every chunk says how many
tokens it carries. The timing rule, per request:

* ``ttft_s``: send → arrival of the first chunk that carries a token;
* a chunk carrying ``n`` tokens that arrives ``Δ`` after the previous
  token-bearing chunk contributes ``n`` inter-token latencies of ``Δ/n``
  each (the gap is spread evenly over the tokens it delivered);
* extra tokens in the *first* chunk get ITL ``0`` (they arrived together
  with the first token);
* ``latency_s``: send → arrival of the last token-bearing chunk.

Hence ``len(itl) == tokens - 1`` and ``sum(itl) == latency - ttft``, so
TPOT = ``(latency - ttft) / (tokens - 1)`` = ``mean(itl)``. (``vllm bench
serve`` appends one ITL per *chunk*, so under speculation its ITLs are the
verify-step gaps, about τ times ours, while its TPOT agrees.) When the server
does not return token ids (not vLLM), each non-empty chunk counts as one
token and the record's ``output_token_ids`` stays empty.

Errors are never dropped: every request that was sent yields exactly one
:class:`RequestResult`; failures carry ``error`` as ``"<kind>: <detail>"``
with kind one of :data:`ERROR_KINDS`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specbench.config.plan import Cell
from specbench.engines.step_trace import trace_from_vllm
from specbench.results import counters
from specbench.results.records import RequestRecord
from specbench.results.requests import PreparedPrompt, SamplingRequest, request_seed

try:  # msgspec ships with vLLM and decodes ~2x faster than json
    import msgspec.json as _msgspec_json

    _loads: Callable[[bytes], Any] = _msgspec_json.decode
except ImportError:  # pragma: no cover - plain environments
    _loads = json.loads

ERROR_KINDS = ("http", "timeout", "connection", "stream", "incomplete", "cancelled")


@dataclass
class RequestItem:
    """One request to send: where, what, and the key it is recorded under."""

    prompt_id: str
    sample_index: int
    path: str  # "/v1/completions" or "/v1/chat/completions"
    body: dict[str, Any]
    seed: int | None = None


def build_item(
    prompt: PreparedPrompt,
    sampling: SamplingRequest,
    model: str,
    *,
    sample: int = 0,
    repeat: int = 0,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> RequestItem:
    """The streaming request body for one prompt and sample."""
    seed = request_seed(sampling, prompt.prompt_id, sample, repeat)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": prompt.max_tokens or sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }
    if sampling.stop:
        body["stop"] = sampling.stop
    if prompt.messages is not None:
        path = "/v1/chat/completions"
        body["messages"] = prompt.messages
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        if sampling.logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = sampling.logprobs
            body["return_tokens_as_token_ids"] = True
    else:
        if prompt.text is None:
            raise ValueError(f"prompt {prompt.prompt_id!r} has neither messages nor text")
        path = "/v1/completions"
        body["prompt"] = prompt.text
        if sampling.logprobs is not None:
            body["logprobs"] = sampling.logprobs
            body["return_tokens_as_token_ids"] = True
    return RequestItem(prompt.prompt_id, sample, path, body, seed)


@dataclass
class RequestResult:
    """What the client saw for one request (times are ``perf_counter`` seconds)."""

    item: RequestItem
    sent_at: float
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (arrival, tokens) per token chunk
    token_ids: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    spec_metrics: dict[str, Any] | None = None
    logprobs: list[dict[int, float]] | None = None
    error: str | None = None
    done: bool = False  # saw ``data: [DONE]``
    finished_at: float | None = None
    sent_offset_s: float | None = None  # sent_at minus the start of the load (set by run_load)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error_kind(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.chunks)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def timing(self) -> tuple[float | None, list[float] | None, float | None]:
        """``(ttft, itl, latency)`` by the token-spreading rule (module doc)."""
        return token_timing(self.sent_at, self.chunks)


def token_timing(
    sent_at: float, chunks: Sequence[tuple[float, int]]
) -> tuple[float | None, list[float] | None, float | None]:
    """TTFT, per-token ITLs and latency from ``(arrival_time, n_tokens)`` chunks.

    See the module docstring for the rule. Chunks with ``n_tokens == 0`` are
    ignored. Returns ``(None, None, None)`` when no token arrived.
    """
    chunks = [(t, n) for t, n in chunks if n > 0]
    if not chunks:
        return None, None, None
    t0, n0 = chunks[0]
    itl: list[float] = [0.0] * (n0 - 1)
    prev = t0
    for t, n in chunks[1:]:
        gap = (t - prev) / n
        itl.extend([gap] * n)
        prev = t
    return t0 - sent_at, itl, prev - sent_at


def _token_id(tok: str | None) -> int | None:
    if tok and tok.startswith("token_id:"):
        try:
            return int(tok[9:])
        except ValueError:
            return None
    return None


def _parse_logprobs(choice: dict[str, Any], chat: bool) -> list[dict[int, float]]:
    lp = choice.get("logprobs")
    if not lp:
        return []
    out: list[dict[int, float]] = []
    if chat:
        for entry in lp.get("content") or []:
            top = {}
            for t in entry.get("top_logprobs") or []:
                tid = _token_id(t.get("token"))
                if tid is not None:
                    top[tid] = float(t["logprob"])
            tid = _token_id(entry.get("token"))
            if tid is not None and tid not in top:
                top[tid] = float(entry["logprob"])
            out.append(top)
    else:
        for top_map in lp.get("top_logprobs") or []:
            top = {}
            for tok, v in (top_map or {}).items():
                tid = _token_id(tok)
                if tid is not None:
                    top[tid] = float(v)
            out.append(top)
    return out


def _handle_event(res: RequestResult, data: dict[str, Any], now: float, chat: bool) -> None:
    """Fold one decoded SSE event into ``res``."""
    if "error" in data or data.get("object") == "error":
        err = data.get("error", data)
        msg = err.get("message", err) if isinstance(err, dict) else err
        res.error = f"stream: {msg}"
        return
    choices = data.get("choices")
    if choices:
        ch = choices[0]
        if chat:
            delta = ch.get("delta") or {}
            text = delta.get("content") or ""
        else:
            text = ch.get("text") or ""
        ids = ch.get("token_ids")
        if ids is not None:
            n = len(ids)
            res.token_ids.extend(ids)
        else:
            n = 1 if text else 0
        if n:
            res.chunks.append((now, n))
        if text:
            res.text_parts.append(text)
        if ch.get("finish_reason") is not None:
            res.finish_reason = ch["finish_reason"]
        if ch.get("logprobs"):
            if res.logprobs is None:
                res.logprobs = []
            res.logprobs.extend(_parse_logprobs(ch, chat))
        if res.prompt_tokens is None and ch.get("prompt_token_ids") is not None:
            res.prompt_tokens = len(ch["prompt_token_ids"])
    if res.prompt_tokens is None and data.get("prompt_token_ids") is not None:
        res.prompt_tokens = len(data["prompt_token_ids"])
    usage = data.get("usage")
    if usage:
        res.prompt_tokens = usage.get("prompt_tokens", res.prompt_tokens)
        res.usage_completion_tokens = usage.get("completion_tokens")
    metrics = data.get("metrics")
    if metrics and metrics.get("speculative_decoding"):
        res.spec_metrics = metrics["speculative_decoding"]


async def stream_request(
    session: aiohttp.ClientSession,
    base_url: str,
    item: RequestItem,
    timeout_s: float,
    on_sent: Callable[[RequestResult], None] | None = None,
) -> RequestResult:
    """Send one streaming request and collect its chunks.

    Never raises for request failures (they become ``error``); re-raises
    :class:`asyncio.CancelledError` after recording ``cancelled`` in the
    result handed to ``on_sent`` (so a caller that cancels still has it).
    """
    chat = item.path.endswith("chat/completions")
    res = RequestResult(item=item, sent_at=time.perf_counter())
    if on_sent is not None:
        on_sent(res)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with session.post(base_url + item.path, json=item.body, timeout=timeout) as resp:
            if resp.status != 200:
                body = (await resp.text())[:500]
                res.error = f"http: {resp.status} {body}"
                return res
            buf = b""
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                buf += data
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line = buf[:i].strip()
                    buf = buf[i + 1 :]
                    if not line.startswith(b"data:"):
                        continue  # blank separator, SSE comment or other field
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        res.done = True
                        continue
                    try:
                        event = _loads(payload)
                    except ValueError:
                        res.error = f"stream: undecodable event {payload[:200]!r}"
                        continue
                    _handle_event(res, event, now, chat)
            if res.error is None and not res.done:
                res.error = "incomplete: stream ended before [DONE]"
    except asyncio.CancelledError:
        res.error = res.error or "cancelled: request cancelled before it finished"
        res.finished_at = time.perf_counter()
        raise
    except TimeoutError:
        res.error = f"timeout: no complete response within {timeout_s:g} s"
    except aiohttp.ClientPayloadError as exc:
        res.error = f"incomplete: {type(exc).__name__}: {exc}"
    except (aiohttp.ClientError, OSError) as exc:
        res.error = f"connection: {type(exc).__name__}: {exc}"
    finally:
        if res.finished_at is None:
            res.finished_at = time.perf_counter()
    return res


def make_session(concurrency: int | None) -> aiohttp.ClientSession:
    """A session for ``concurrency`` streams to one host (``None``: unlimited); no proxy lookup."""
    limit = 0 if concurrency is None else max(concurrency, 1) + 4
    conn = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=None)
    return aiohttp.ClientSession(connector=conn, trust_env=False, timeout=aiohttp.ClientTimeout(total=None))



# ---------------------------------------------------------------------------
# records


def to_record(
    res: RequestResult, *, run_id: str, cell: Cell, engine_key: str, k: int | None, method: str | None = None
) -> RequestRecord:
    """A :class:`RequestRecord` from a client-side result (partial output kept on error)."""
    ttft, itl, latency = res.timing()
    return RequestRecord(
        run_id=run_id,
        cell_id=cell.cell_id,
        engine_key=engine_key,
        prompt_id=res.item.prompt_id,
        repeat=cell.repeat,
        sample_index=res.item.sample_index,
        seed=res.item.seed,
        prompt_tokens=res.prompt_tokens or 0,
        output_token_ids=list(res.token_ids),
        output_text=res.text,
        finish_reason=res.finish_reason,
        latency_s=latency,
        ttft_s=ttft,
        itl_s=itl,
        spec=counters.from_response(res.spec_metrics, k),
        steps=trace_from_vllm(res.spec_metrics, method),
        logprobs=res.logprobs,
        error=res.error,
        sent_offset_s=res.sent_offset_s,
    )
