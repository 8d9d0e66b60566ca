"""A vLLM-like streaming server on loopback, for tests of what talks to a server (no engine).

It speaks vLLM's streaming formats (completions and chat, with ``token_ids``, a final usage chunk
carrying ``metrics.speculative_decoding``, ``/metrics``) and misbehaves on request: the prompt
text selects HTTP errors, stalls, dropped connections and error events.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from aiohttp import web

from specbench.results.counters import from_response
from specbench.results.records import SpecCounters

#: The draft positions the fake server speculates with.
K = 3


class FakeServer:
    """A vLLM-like streaming server on 127.0.0.1 in a background thread.

    Per request it streams ``max_tokens`` tokens in chunks of ``chunk`` tokens
    (default 1) ``gap_s`` apart; every request "accepts" ``accept`` drafts per
    verify step, and ``/metrics`` reports the cumulative counters.
    """

    def __init__(self, gap_s: float = 0.002, chunk: int = 1, accept: int = 2):
        self.gap_s = gap_s
        self.chunk = chunk
        self.accept = accept
        self.requests: list[dict[str, Any]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.arrivals: list[float] = []
        self.counters = SpecCounters(accepted_per_pos=[0] * K)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    # -- plumbing
    def __enter__(self) -> FakeServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.loop is not None and self._stop is not None
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake-model"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        c = self.counters
        lines = [
            "# TYPE vllm:spec_decode_num_drafts counter",
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {c.num_drafts}.0',
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {c.num_draft_tokens}.0',
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {c.num_accepted_tokens}.0',
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ]
        for i, v in enumerate(c.accepted_per_pos):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}} {v}.0'
            )
        return web.Response(text="\n".join(lines) + "\n")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, chat=True)

    async def _stream(self, request: web.Request, chat: bool) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.arrivals.append(time.perf_counter())
        prompt = json.dumps(body.get("messages")) if chat else body["prompt"]
        if "http500" in prompt:
            return web.Response(status=500, text="boom")
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            n = int(body["max_tokens"])
            if chat:
                first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                await resp.write(b"data: " + json.dumps(first).encode() + b"\n\n")
            sent = 0
            steps = []
            while sent < n:
                await asyncio.sleep(self.gap_s)
                if "stall" in prompt and sent >= 2:
                    await asyncio.sleep(30)
                if "drop" in prompt and sent >= 2:
                    request.transport.close()  # type: ignore[union-attr]
                    return resp
                if "errevent" in prompt and sent >= 2:
                    await resp.write(b'data: {"error": {"message": "engine exploded", "code": 500}}\n\n')
                    await resp.write(b"data: [DONE]\n\n")
                    return resp
                m = min(self.chunk if sent else 1, n - sent)
                ids = [100 + sent + i for i in range(m)]
                text = "".join(f"t{i}" for i in ids)
                sent += m
                if len(steps) or sent > 1:
                    steps.append(min(m - 1, K))
                finish = "length" if sent >= n else None
                if chat:
                    choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "token_ids": ids}
                else:
                    choice = {"index": 0, "text": text, "token_ids": ids}
                choice["finish_reason"] = finish
                if body.get("logprobs"):
                    if chat:
                        choice["logprobs"] = {
                            "content": [
                                {
                                    "token": f"token_id:{i}",
                                    "logprob": -0.5,
                                    "top_logprobs": [
                                        {"token": f"token_id:{i}", "logprob": -0.5},
                                        {"token": "token_id:7", "logprob": -1.5},
                                    ],
                                }
                                for i in ids
                            ]
                        }
                    else:
                        choice["logprobs"] = {
                            "top_logprobs": [{f"token_id:{i}": -0.5, "token_id:7": -1.5} for i in ids]
                        }
                await resp.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
            # Spec metrics: each request "verifies" n//(accept+1) steps accepting `accept` drafts each.
            hist = [0] * (K + 1)
            n_steps = max(1, n // (self.accept + 1))
            hist[self.accept] = n_steps
            sd = {
                "acceptance_histogram": hist,
                "num_draft_tokens": K * n_steps,
                "num_spec_tokens": K,
                "num_accepted_draft_tokens": self.accept * n_steps,
            }
            self.counters = self.counters + from_response(sd, K)  # type: ignore[operator]
            usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}}
            usage["metrics"] = {"speculative_decoding": sd}
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            self.inflight -= 1
