"""An engine worker in another Python environment (a target's ``python:``; an A/B arm's interpreter).

``multiprocessing``'s spawn cannot do it: its child takes the parent's ``sys.path`` before it runs
anything, so the other interpreter would import this environment's vLLM. Here the interpreter is
started as a plain subprocess (``python -c … <fd>``) with its own ``sys.path``; it must be able to
import specbench (docs/ab.md: a ``.pth`` file naming the checkout). The parent keeps one end of a
socket pair as a ``multiprocessing`` :class:`~multiprocessing.connection.Connection`, the child gets
the other by file descriptor, receives ``(target, args)`` and calls ``target(conn, *args)``: the same
worker function and protocol a spawned worker runs.
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from specbench.engines.procs import pdeathsig_preexec


class InterpreterProcess:
    """What an engine needs of ``multiprocessing.Process`` (pid, alive, join, kill, exit code) for a
    worker running in another interpreter."""

    def __init__(self, popen: subprocess.Popen[bytes]):
        self._popen = popen
        self.pid = popen.pid

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()


def executable(python: str) -> str:
    """``python`` as a path (a name is looked up on PATH)."""
    return python if "/" in python else (shutil.which(python) or python)


def start_in(python: str, target: str, args: tuple[Any, ...], env: dict[str, str] | None = None
             ) -> tuple[InterpreterProcess, Connection]:
    """Start ``python`` running ``target`` (``module:function``) as ``function(conn, *args)``;
    the process and the parent's end of the connection."""
    ours, theirs = socket.socketpair()
    fd = theirs.detach()
    code = "import sys; from specbench.engines.interpreter import child_main; child_main(int(sys.argv[1]))"
    try:
        popen = subprocess.Popen([executable(python), "-c", code, str(fd)], pass_fds=[fd],
                                 env={**os.environ, **(env or {})}, preexec_fn=pdeathsig_preexec())
    finally:
        os.close(fd)
    conn = Connection(ours.detach())
    conn.send((target, args))
    return InterpreterProcess(popen), conn


def child_main(fd: int) -> None:
    """In the other interpreter: receive the target and its arguments, then run it."""
    conn = Connection(fd)
    target, args = conn.recv()
    module, _, name = target.partition(":")
    getattr(importlib.import_module(module), name)(conn, *args)
    sys.exit(0)
