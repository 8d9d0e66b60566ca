"""The parent's side of an engine that runs in a child process and answers over a pipe: the one copy of what
happens when that process dies or stops answering (:class:`PipedEngine`), shared by the vLLM offline engine
(:mod:`specbench.engines.vllm_offline`) and any in-process engine run in a child (:mod:`specbench.engines.child`).

A process that dies while starting makes the engine unavailable (:class:`EngineUnavailable`); one that dies
during a cell fails that cell with ``engine_dead`` (:class:`CellFailed`), its exit code in the reason and the
tail of its log attached; one that does not answer within the timeout is killed first. The run goes on: only
that engine's cells fail.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from specbench.config.plan import EngineConfig
from specbench.engines.protocol import CellFailed, EngineUnavailable


def tail(path: Path | None, n_chars: int = 4000) -> str:
    """The last ``n_chars`` of a log file ("" when there is none)."""
    if path is None or not path.exists():
        return ""
    data = path.read_bytes()[-n_chars:]
    return data.decode("utf-8", "replace")


class PipedEngine:
    """What a child-process engine's parent side holds (its process, the pipe's end, its log) and how it waits
    for the child's next message. Subclasses say how to end the process (:meth:`kill`) and what to let go of once
    it has died (:meth:`_gone`)."""

    config: EngineConfig
    log_path: Path
    _proc: Any = None
    _conn: Any = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def kill(self) -> None:
        """End the process at once."""
        raise NotImplementedError

    def _gone(self) -> None:
        """The process has died: release what this side holds of it."""
        raise NotImplementedError

    def _dead(self, reason: str, *, starting: bool = False) -> EngineUnavailable | CellFailed:
        """The error for an engine process that is gone: unavailable while starting, else its cell failed."""
        if starting:
            return EngineUnavailable(reason, log_tail=tail(self.log_path))
        return CellFailed(reason, engine_dead=True, log_tail=tail(self.log_path))

    def _require_running(self) -> None:
        if not self.alive:
            raise self._dead("engine is not running")

    def _recv(self, timeout: float, starting: bool = False) -> tuple[str, Any]:
        """The child's next message; raises :meth:`_dead`'s error when the process dies first, or when it sends
        nothing within ``timeout`` seconds (it is killed then)."""
        deadline = time.monotonic() + timeout
        while True:
            if self._conn.poll(0.2):
                try:
                    return self._conn.recv()
                except (EOFError, OSError):
                    break
            if not self._proc.is_alive():
                if self._conn.poll(0):
                    continue
                break
            if time.monotonic() > deadline:
                self.kill()
                raise self._dead(f"engine did not {'start' if starting else 'finish the cell'} within {timeout:.0f} s",
                                 starting=starting)
        if self._proc is not None:
            self._proc.join(timeout=5)  # the pipe may close before the process is reaped: wait for its exit code
        code = self._proc.exitcode if self._proc is not None else None
        self._gone()
        raise self._dead(f"engine process died (exit code {code})", starting=starting)
