"""Engine processes never outlive specbench.

* :func:`die_with_parent` (called first thing in a spawned worker) and
  :func:`pdeathsig_preexec` (a ``preexec_fn`` for ``subprocess.Popen``) ask
  Linux to signal the process when its parent dies (``PR_SET_PDEATHSIG``),
  so not even a SIGKILLed specbench leaves an engine holding the GPUs. A
  no-op elsewhere. The signal follows the death of the parent *thread* that
  started the child: engines are started from the main thread. It is not
  inherited by the child's own children: a process with children of its
  own (``vllm serve`` and its EngineCore) is better sent SIGTERM, which
  its shutdown passes on, than SIGKILL, which orphans them.
* :data:`LIVE` lists the engine processes started and not yet ended;
  :func:`end_all` kills what is left (a run that was stopped part-way through
  an engine's own clean-up).
* :func:`kill_tree` ends a process group and every descendant of its leader,
  including one that left the group.
* :func:`end_resource_tracker` has multiprocessing's resource tracker clean up
  after killed workers now, not at exit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # pragma: no cover - no usable libc
        return None


# Resolved here, in the parent, so that a preexec function does no loading between fork and exec.
_PRCTL = _load_prctl()


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> bool:
    """Have this process receive ``sig`` when its parent dies (Linux; ``False`` elsewhere).

    ``parent_pid``: the parent this process was started by; when it is
    already gone (it died before the call), the signal is sent now.
    """
    if _PRCTL is None:
        return False
    if _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:  # pragma: no cover
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    return True


def group_dies_with_parent(parent_pid: int | None = None) -> bool:
    """Make this process a process-group leader whose whole group is SIGKILLed when its parent dies.

    For a worker that starts processes of its own (vLLM's EngineCore on a GPU):
    they stay in its group, and the group goes at once. The process gets
    SIGTERM on the parent's death, and its SIGTERM handler kills the group; so
    nobody else should send it SIGTERM. Being out of the parent's group, it no
    longer receives a terminal's Ctrl-C: the parent decides what stops. Linux
    only (``False`` elsewhere, where nothing is changed).
    """
    if _PRCTL is None:
        return False
    os.setpgrp()
    signal.signal(signal.SIGTERM, _kill_own_group)
    return die_with_parent(parent_pid, signal.SIGTERM)


def _kill_own_group(signum: int, frame: Any) -> None:
    os.killpg(0, signal.SIGKILL)


def pdeathsig_preexec(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child die with the calling process (``None`` off Linux)."""
    if _PRCTL is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        die_with_parent(parent, sig)

    return preexec


# --------------------------------------------------------------------------
# live engine processes


class _Live:
    """Engine processes started in this process and not yet ended: name → kill function."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kills: dict[int, tuple[str, Callable[[], None]]] = {}
        self._next = 0

    def add(self, name: str, kill: Callable[[], None]) -> int:
        with self._lock:
            self._next += 1
            self._kills[self._next] = (name, kill)
            return self._next

    def discard(self, token: int | None) -> None:
        if token is not None:
            with self._lock:
                self._kills.pop(token, None)

    def names(self) -> list[str]:
        with self._lock:
            return [n for n, _ in self._kills.values()]

    def end_all(self) -> list[str]:
        """Kill every listed process (no grace: for a run that is stopping); the names ended."""
        with self._lock:
            items, self._kills = list(self._kills.values()), {}
        ended = []
        for name, kill in items:
            try:
                kill()
                ended.append(name)
            except Exception:  # noqa: BLE001 - one failure must not keep the others alive
                pass
        return ended


LIVE = _Live()


def end_all() -> list[str]:
    """Kill every engine process still listed in :data:`LIVE`; the names ended."""
    return LIVE.end_all()


def end_resource_tracker(timeout_s: float = 5.0) -> None:
    """End multiprocessing's resource tracker now (a new one starts when next needed).

    Spawned workers share it; what a killed worker had registered (vLLM's
    semaphores) it cleans up and reports with a warning when it ends. That
    is at specbench's exit otherwise, below the line that says how to resume.
    Bounded: a process still holding the tracker's pipe would keep it waiting.
    """
    from multiprocessing import resource_tracker

    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is None:  # pragma: no cover - a Python without it
        return
    t = threading.Thread(target=stop, name="specbench-end-resource-tracker", daemon=True)
    t.start()
    t.join(timeout_s)


def descendants(pid: int) -> list[Any]:
    """``psutil.Process`` objects of every descendant of ``pid`` (empty without psutil or ``pid``)."""
    try:
        import psutil

        return list(psutil.Process(pid).children(recursive=True))
    except Exception:  # noqa: BLE001 - psutil missing, process gone
        return []


def kill_tree(pid: int, sig: int = signal.SIGKILL, also: list[Any] | None = None) -> None:
    """Send ``sig`` to ``pid``'s process group (where ``pid`` leads one: started with
    ``start_new_session``, or :func:`group_dies_with_parent`), to ``pid``, to every
    descendant of ``pid`` (one that left the group included) and to the ``also``
    processes (``psutil.Process`` objects collected earlier: once ``pid`` is gone
    its children are no longer its descendants)."""
    procs = descendants(pid) + list(also or [])
    for send in (os.killpg, os.kill):  # a pid that leads no group: killpg finds no group
        try:
            send(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.send_signal(sig)  # psutil checks the pid was not reused
        except Exception:  # noqa: BLE001 - already gone
            pass


def wait_gone(procs: list[Any], timeout_s: float) -> None:
    """Wait (at most ``timeout_s``) until the ``psutil.Process`` objects ``procs`` have exited."""
    if not procs:
        return
    try:
        import psutil

        psutil.wait_procs(procs, timeout=timeout_s)
    except Exception:  # noqa: BLE001 - psutil missing
        pass


def end_process(proc: Any, conn: Any, message: tuple, grace_s: float) -> None:
    """Ask a waiting worker to leave (``message`` on its pipe), then kill it if it has not after ``grace_s``."""
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass
    proc.join(timeout=grace_s)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)


def available_gib() -> float:
    """MemAvailable of this machine (GiB); a large number where /proc/meminfo is missing."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 1e9
