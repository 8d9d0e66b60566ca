"""Running a client's coroutine so that a stop signal is not lost: asyncio and uvloop drop what a signal handler
raises inside their loop, so the handler's exception is kept, the coroutine cancelled, and the exception raised
once the loop has unwound (:func:`run_keeping_signals`)."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


def run_keeping_signals(coro: Coroutine[Any, Any, T], on_stop: Callable[[], None] | None = None) -> T:
    """Run a coroutine on a fresh event loop (uvloop when installed: less client overhead).

    A SIGINT/SIGTERM whose Python handler raises (``KeyboardInterrupt``, or a
    run's stop) must not raise inside the loop: asyncio and uvloop log and
    drop any exception but ``KeyboardInterrupt``/``SystemExit`` raised in a
    loop callback, and uvloop even while it waits for I/O, so the stop would
    be lost and the cell run on. While the loop runs (main thread only), such
    a handler is called at once and what it raises is kept: ``on_stop`` is
    called, the coroutine is cancelled, and once the loop has unwound (its
    tasks cancelled, the HTTP session closed) the kept exception is raised here.
    """
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        factory = None
    raised: list[BaseException] = []
    main: list[asyncio.Task[T]] = []

    def on_raise(exc: BaseException) -> None:
        raised.append(exc)
        if len(raised) == 1:
            if on_stop is not None:
                on_stop()
            if main and not main[0].done():
                main[0].cancel()
                main[0].get_loop().call_soon_threadsafe(lambda: None)  # wake the loop

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None
        main.append(task)
        if raised:  # a signal came before the loop started
            coro.close()
            raise asyncio.CancelledError
        return await coro

    with _signals_kept(on_raise):
        try:
            if sys.version_info >= (3, 11):
                with asyncio.Runner(loop_factory=factory) as runner:
                    result = runner.run(guarded())
            else:  # pragma: no cover
                result = asyncio.run(guarded())
        except asyncio.CancelledError:
            if not raised:
                raise
    if raised:
        raise raised[0]
    return result


@contextmanager
def _signals_kept(on_raise: Callable[[BaseException], None]) -> Iterator[None]:
    """While inside, SIGINT/SIGTERM handlers that are Python functions run wrapped: what they raise goes to ``on_raise``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: dict[int, Any] = {}

    def wrapped(signum: int, frame: FrameType | None) -> None:
        handler = old.get(signum)
        if callable(handler):
            try:
                handler(signum, frame)
            except BaseException as exc:  # noqa: BLE001 - raised again once the loop has unwound
                on_raise(exc)

    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            if callable(signal.getsignal(sig)):  # SIG_DFL and SIG_IGN keep their meaning
                old[sig] = signal.signal(sig, wrapped)
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
