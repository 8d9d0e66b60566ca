"""Stopping a run on SIGINT or SIGTERM.

:func:`stop_on_signals` turns the first SIGINT or SIGTERM into
:class:`StopRequested`, raised in the main thread wherever it is, so the
``finally`` blocks between there and the caller (engines closed, record files
closed) run on the way out. It overrides an inherited ``SIG_IGN`` (a shell's
background job ignores SIGINT; a supervisor's SIGTERM must still stop the
run) and restores the previous handlers on exit.

A second signal while the first is being handled does not raise again: a new
exception would abandon the clean-up halfway (an engine's process group
half-stopped, a record file left open), which is worse than the wait. The
clean-up is bounded by the engines' own stop timeouts; the second signal is
acknowledged on stderr. ``SIGKILL`` remains the way to end everything at once
(engine processes die with their parent: see :mod:`specbench.engines.procs`).

Orchestration level: imports no engine.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(BaseException):
    """A stop signal arrived: the run ends, keeping what it recorded.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that no ``except
    Exception`` on the way up mistakes it for a failure of one cell or engine.
    ``run_dir`` and ``requests`` are filled in by whoever knows them (the
    API's ``run``) for the closing message.
    """

    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame
        self.run_dir: Path | None = None
        self.requests: int | None = None

    @property
    def signum(self) -> int:
        return int(signal.Signals[self.signame])

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum


@dataclass
class StopState:
    """What :func:`stop_on_signals` saw: the first signal's name, and how many came after it."""

    signame: str | None = None
    repeats: list[str] = field(default_factory=list)

    @property
    def stopping(self) -> bool:
        return self.signame is not None


@contextmanager
def stop_on_signals(signals: tuple[int, ...] = SIGNALS) -> Iterator[StopState]:
    """Raise :class:`StopRequested` in the main thread on the first of ``signals``.

    Outside the main thread (where Python cannot install handlers) this does
    nothing. Later signals are noted in the yielded :class:`StopState` and on
    stderr, never raised.
    """
    state = StopState()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if state.stopping:
            state.repeats.append(name)
            _note(f"specbench: {name} again; still stopping (ending engine processes)\n")
            return
        state.signame = name
        raise StopRequested(name)

    old: dict[int, Any] = {}
    try:
        for sig in signals:
            old[sig] = signal.signal(sig, handler)
        yield state
    finally:
        for sig, prev in old.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)


def _note(text: str) -> None:
    try:
        os.write(2, text.encode())
    except OSError:  # pragma: no cover - stderr closed
        pass
