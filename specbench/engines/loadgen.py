"""The load scheduler for OpenAI-compatible vLLM servers (asyncio): when each request is sent.
Each request goes out through the streaming client, :mod:`specbench.engines.stream_client`, which
also says how tokens are timed and how a failure is recorded.

Two load profiles:

* **fixed concurrency** (closed loop): ``concurrency`` streams in flight; a
  stream sends its next request as soon as the previous one finished;
* **Poisson rate** (open loop): requests arrive at ``request_rate`` per
  second with exponential, seeded inter-arrival times, optionally capped at
  ``concurrency`` in flight (like ``vllm bench serve --max-concurrency``).

Both stop after ``num_requests`` and/or once ``duration_s`` has passed (no
new request is sent after the deadline; those in flight finish). Warmup
requests run first and are never reported.

Conversations (``follow_up``): each item is then a conversation's first turn, and
its later turns are sent one after the other on the stream (or in-flight slot) the
conversation holds, each as soon as the one before finished; so ``concurrency``
counts conversations in flight, Poisson arrivals are conversations, and
``num_requests`` and the deadline bound the conversations started (one under way
is carried to its end unless the run aborts).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, Field

from specbench.config.plan import Cell
from specbench.engines.stream_client import RequestItem, RequestResult, stream_request

#: A conversation's next request once one of its requests finished (None: it has ended).
FollowUp = Callable[["RequestResult"], "RequestItem | None"]


class LoadProfile(BaseModel):
    """How one cell's requests are offered to the server.

    Without ``request_rate`` the load is closed-loop at ``concurrency``
    streams. With ``request_rate`` it is open-loop Poisson (arrival times from
    :func:`poisson_offsets`, seeded) and ``concurrency`` (if given) caps
    requests in flight. :meth:`for_cell` builds the profile of a plan cell.
    """

    model_config = ConfigDict(extra="forbid")

    concurrency: int | None = Field(None, ge=1)
    request_rate: float | None = Field(None, gt=0)
    num_requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0)
    warmup_requests: int = Field(0, ge=0)
    seed: int = 0
    request_timeout_s: float = Field(600.0, gt=0)

    @classmethod
    def for_cell(cls, cell: Cell, load: LoadProfile | None = None, *, seed: int | None = None) -> LoadProfile:
        """The profile of a plan cell.

        The load shape comes from the cell: ``request_rate`` (Poisson, capped
        at ``batch_size`` in flight when that is > 0) or ``concurrency =
        batch_size``. Bounds, warmup and timeout come from ``load`` (the profile
        every cell of a run shares, built from the plan's load bounds; defaults
        when None). The seed (``seed``, else ``load.seed``) mixes in the repeat
        so repeats see different arrival sequences, reproducibly.
        """
        load = load if load is not None else cls()
        base = seed if seed is not None else load.seed
        if cell.request_rate is not None:
            rate: float | None = float(cell.request_rate)
            concurrency = cell.batch_size if cell.batch_size > 0 else None
        else:
            rate, concurrency = None, max(1, cell.batch_size)
        return cls(
            concurrency=concurrency,
            request_rate=rate,
            num_requests=load.num_requests,
            duration_s=load.duration_s,
            warmup_requests=load.warmup_requests,
            seed=base + 104729 * cell.repeat,
            request_timeout_s=load.request_timeout_s,
        )

    @property
    def mode(self) -> Literal["concurrency", "poisson"]:
        return "poisson" if self.request_rate is not None else "concurrency"


def poisson_offsets(rate: float, seed: int) -> Iterator[float]:
    """Arrival times (seconds after the load starts) of a Poisson process at ``rate`` per second.

    Exponential gaps from ``random.Random(seed)``; the first request arrives
    after one gap, not at 0. The open-loop generator sends request ``i`` at
    offset ``i`` of this sequence (later only when a concurrency cap is full).
    """
    rng = random.Random(seed)
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t



# ---------------------------------------------------------------------------
# load profiles


@dataclass
class LoadReport:
    """Outcome of :func:`run_load` (measured requests only)."""

    results: list[RequestResult]
    started_at: float
    finished_at: float
    aborted: str | None = None  # reason when the run was cut short
    not_sent: int = 0

    @property
    def wall_time_s(self) -> float:
        return self.finished_at - self.started_at

    def error_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.results:
            if r.error_kind is not None:
                counts[r.error_kind] = counts.get(r.error_kind, 0) + 1
        return counts


async def run_load(
    session: aiohttp.ClientSession,
    base_url: str,
    items: Sequence[RequestItem],
    profile: LoadProfile,
    on_result: Callable[[RequestResult], None],
    *,
    abort: asyncio.Event | None = None,
    check_alive: Callable[[], Awaitable[bool]] | None = None,
    alive_hint: Callable[[], bool] | None = None,
    follow_up: FollowUp | None = None,
) -> LoadReport:
    """Offer ``items`` to the server under ``profile``; ``on_result`` gets every sent request once.

    With ``follow_up`` every item starts a conversation whose next turns it gives (module doc).

    Warmup is *not* handled here (see :func:`run_warmup`). When ``abort`` is
    set (by a watchdog, or here when a connection error meets a failed
    ``check_alive``), no new request is sent and those in flight are
    cancelled; each still reaches ``on_result`` with ``error`` set.
    ``alive_hint`` (cheap, synchronous: e.g. "is the server process still
    running") is asked before every send; ``False`` aborts the run.
    """
    load = _Load(session, base_url, items, profile, on_result, abort or asyncio.Event(), check_alive, alive_hint,
                 follow_up)
    return await load.run()


class _Load:
    """One :func:`run_load`: what is left to send, what is in flight, what was delivered, and why it stopped."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, items: Sequence[RequestItem],
                 profile: LoadProfile, on_result: Callable[[RequestResult], None], abort: asyncio.Event,
                 check_alive: Callable[[], Awaitable[bool]] | None, alive_hint: Callable[[], bool] | None,
                 follow_up: FollowUp | None):
        self.session, self.base_url, self.profile, self.on_result = session, base_url, profile, on_result
        self.abort, self.check_alive, self.alive_hint, self.follow_up = abort, check_alive, alive_hint, follow_up
        self.todo: deque[RequestItem] = deque(items[: profile.num_requests] if profile.num_requests else items)
        self.inflight: dict[asyncio.Task[Any], RequestResult] = {}
        self.delivered: set[int] = set()
        self.results: list[RequestResult] = []
        self.t_start = time.perf_counter()
        self.deadline = self.t_start + profile.duration_s if profile.duration_s else None
        self.reason: list[str] = []

    def deliver(self, res: RequestResult) -> None:
        if id(res) in self.delivered:
            return
        self.delivered.add(id(res))
        self.results.append(res)
        self.on_result(res)

    def going(self) -> bool:
        if self.alive_hint is not None and not self.abort.is_set() and not self.alive_hint():
            self.reason.append("server process is gone")
            self.abort.set()
        return not self.abort.is_set()

    def may_send(self) -> bool:
        return self.going() and bool(self.todo) and (self.deadline is None or time.perf_counter() < self.deadline)

    async def one(self, item: RequestItem) -> RequestResult:
        holder: list[RequestResult] = []
        task = asyncio.current_task()
        assert task is not None

        def sent(r: RequestResult) -> None:
            r.sent_offset_s = r.sent_at - self.t_start
            holder.append(r)
            self.inflight[task] = r

        try:
            res = await stream_request(self.session, self.base_url, item, self.profile.request_timeout_s, on_sent=sent)
        except asyncio.CancelledError:
            if holder:
                self.deliver(holder[0])
            raise
        finally:
            self.inflight.pop(task, None)
        self.deliver(res)
        if res.error_kind in ("connection", "incomplete") and self.check_alive is not None and not self.abort.is_set():
            if not await self.check_alive():
                self.reason.append(f"server unreachable after {res.error}")
                self.abort.set()
        return res

    async def chain(self, item: RequestItem | None) -> None:
        """One request, or a whole conversation: its turns one after the other."""
        while item is not None:
            res = await self.one(item)
            item = self.follow_up(res) if self.follow_up is not None and self.going() else None

    async def closed_loop(self) -> None:
        async def worker() -> None:
            while self.may_send():
                await self.chain(self.todo.popleft())

        n = self.profile.concurrency or 1
        await asyncio.gather(*(worker() for _ in range(n)))

    async def open_loop(self) -> None:
        assert self.profile.request_rate is not None
        arrivals = poisson_offsets(self.profile.request_rate, self.profile.seed)
        sem = asyncio.Semaphore(self.profile.concurrency) if self.profile.concurrency else None
        tasks: list[asyncio.Task[None]] = []

        async def gated(item: RequestItem) -> None:
            if sem is None:
                await self.chain(item)
                return
            async with sem:
                if self.abort.is_set():
                    self.todo.appendleft(item)  # never sent
                    return
                await self.chain(item)

        while self.may_send():
            next_t = self.t_start + next(arrivals)  # the schedule, whatever the completions do
            delay = next_t - time.perf_counter()
            if delay > 0:
                try:
                    await asyncio.wait_for(self.abort.wait(), timeout=delay)
                except TimeoutError:
                    pass
                if not self.may_send():
                    break
            tasks.append(asyncio.create_task(gated(self.todo.popleft())))
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def run(self) -> LoadReport:
        main = asyncio.create_task(self.open_loop() if self.profile.mode == "poisson" else self.closed_loop())

        async def watch_abort() -> None:
            await self.abort.wait()
            for t in list(self.inflight):
                t.cancel()
            main.cancel()

        watcher = asyncio.create_task(watch_abort())
        try:
            await main
        except asyncio.CancelledError:
            if not self.abort.is_set():
                raise  # cancelled from outside (Ctrl-C): propagate
            # Give cancelled requests a moment to deliver their results.
            for _ in range(50):
                if not self.inflight:
                    break
                await asyncio.sleep(0.01)
        finally:
            watcher.cancel()
        t_end = max((r.finished_at or self.t_start for r in self.results), default=self.t_start)
        return LoadReport(
            results=self.results,
            started_at=self.t_start,
            finished_at=max(t_end, self.t_start),
            aborted=(self.reason[0] if self.reason else "aborted") if self.abort.is_set() else None,
            not_sent=len(self.todo),
        )


async def run_warmup(
    session: aiohttp.ClientSession,
    base_url: str,
    items: Sequence[RequestItem],
    n: int,
    concurrency: int,
    timeout_s: float,
) -> list[RequestResult]:
    """Send ``n`` warmup requests (cycling over ``items``) ``concurrency`` at a time; results are not recorded."""
    if n <= 0 or not items:
        return []
    todo = [items[i % len(items)] for i in range(n)]
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(it: RequestItem) -> RequestResult:
        async with sem:
            return await stream_request(session, base_url, it, timeout_s)

    return list(await asyncio.gather(*(one(it) for it in todo)))
