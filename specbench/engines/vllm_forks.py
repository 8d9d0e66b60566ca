"""vLLM offline workers forked from a process that imported vLLM once (a *zygote*), on CPU.

A spawned worker spends ~6 s of CPU importing vLLM's entry point before it builds
its engine; a run starts many engines with the same environment. A zygote is a
spawned worker that imports it once, with exactly the environment (and cores) a
spawned worker would have, then forks one worker per engine start (~1.5 s to a
built engine instead of ~8 s). Keyed by that whole environment and the caller's
cores: an engine whose environment differs is spawned as before, so nothing
imported ever read another environment than its engine's.

What a forked worker must take again itself: its cores, and OpenMP's thread
count (sized from the zygote's cores when torch loaded; left as it is, an
engine bound to one core ran 2 threads on it, ~50x slower per token). Only on
CPU: a CUDA process must not fork after torch has loaded there.

The run talks to a forked worker over a pipe whose end the zygote receives
(``multiprocessing.reduction``); the zygote reaps its workers and keeps their
exit codes. A worker dies with the zygote, so a zygote ends only once no worker
of its is alive (kept engines outlive their run).
"""

from __future__ import annotations

import atexit
import gc
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing import reduction
from typing import TYPE_CHECKING, Any

from specbench.engines.procs import LIVE, end_process, group_dies_with_parent

if TYPE_CHECKING:
    from specbench.engines.interpreter import InterpreterProcess

Serve = Callable[[Any, dict[str, Any], dict[str, str]], None]
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})  # rewritten by pytest in every test phase
FORK_HINT = "specbench: forked from the vLLM import of pid"  # first line of a forked worker's log


def _log_to(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _import_engine(env: dict[str, str]) -> None:
    """The engine's environment, the engine patches, then vLLM's import (seconds of CPU).

    ``from vllm import LLM`` does not import the modules the patches replace (they load
    when the engine is built), so a worker forked from a zygote still gets its patches applied.
    """
    os.environ.update(env)
    from specbench.engines.vllm_patches import install_from_env

    install_from_env()  # before vLLM is imported (this child was spawned before env was set)
    import vllm  # noqa: F401


def _as_worker() -> None:
    """First thing in a worker: its own process group, which dies with the parent."""
    parent = mp.parent_process()
    group_dies_with_parent(parent.pid if parent is not None else None)


def _zygote_main(ctl: Any, env: dict[str, str], serve: Serve) -> None:
    """Import vLLM for ``env`` once, then fork a worker per ``("fork", ...)`` request."""
    _as_worker()
    _log_to(os.devnull)
    try:
        _import_engine(env)
        from vllm import LLM, SamplingParams  # noqa: F401

        gc.freeze()
        ok = True
    except BaseException:  # noqa: BLE001 - a spawned worker reports it
        ok = False
    ctl.send(("imported", ok))
    if not ok:
        return
    codes: dict[int, int] = {}
    while True:
        _reap(codes)
        try:
            if not ctl.poll(1.0):
                continue
            msg = ctl.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "fork":
            fd = reduction.recv_handle(ctl)
            pid = os.fork()
            if pid == 0:
                ctl.close()
                code = 1
                try:
                    _forked_main(serve, fd, *msg[1:])
                    code = 0
                except BaseException:  # noqa: BLE001 - into the worker's log; its exit code says it failed
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)  # never back into the zygote's loop
            os.close(fd)
            ctl.send(("forked", pid))
        elif msg[0] == "exitcode":
            _reap(codes, wait_for=msg[1])
            ctl.send(("exitcode", codes.get(msg[1])))
        else:
            return


def _reap(codes: dict[int, int], wait_for: int | None = None) -> None:
    """Collect ended workers' exit codes (and wait for ``wait_for``'s, which is ending)."""
    if wait_for is not None and wait_for not in codes:
        try:
            _, status = os.waitpid(wait_for, 0)
            codes[wait_for] = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            pass
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        codes[pid] = os.waitstatus_to_exitcode(status)


def _forked_main(serve: Serve, fd: int, engine_kwargs: dict[str, Any], log_path: str, env: dict[str, str], name: str,
                 cpus: list[int]) -> None:
    """A forked worker: its environment (the caller's with the engine's), name, cores and threads as a
    spawned one's, then the engine's life."""
    os.environ.clear()
    os.environ.update(env)
    group_dies_with_parent(os.getppid())
    mp.current_process().name = name  # vLLM's log lines name the process: the engine's key, as when spawned
    # Locks made here (vLLM's, tqdm's) with the fork context: their semaphores are unlinked at once,
    # none registered with the run's resource tracker, which would report them leaked at its exit
    # (the worker is killed, never unregisters them).
    mp.set_start_method("fork", force=True)
    _log_to(log_path)
    print(f"{FORK_HINT} {os.getppid()}", flush=True)
    os.sched_setaffinity(0, cpus)
    import torch

    torch.set_num_threads(int(env.get("OMP_NUM_THREADS") or 0) or len(cpus))
    serve(multiprocessing.connection.Connection(fd), engine_kwargs, env)


class ForkedProcess:
    """What the engine needs of ``multiprocessing.Process`` for a worker that is not this
    process's child (its zygote's): alive, join, kill, exit code."""

    def __init__(self, pid: int, zygote: _Zygote):
        import psutil

        self.pid = pid
        self._zygote = zygote
        self._ps = psutil.Process(pid)

    def is_alive(self) -> bool:
        import psutil

        try:
            return self._ps.is_running() and self._ps.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def join(self, timeout: float | None = None) -> None:
        end = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.is_alive() and time.monotonic() < end:
            time.sleep(0.02)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    @property
    def exitcode(self) -> int | None:
        return None if self.is_alive() else self._zygote.exitcode(self.pid)


class _Zygote:
    def __init__(self, env: dict[str, str], serve: Serve, python: str | None = None):
        self.proc: InterpreterProcess | multiprocessing.process.BaseProcess
        if python is not None:  # another environment's interpreter (specbench.engines.interpreter)
            from specbench.engines.interpreter import start_in

            self.proc, self._ctl = start_in(python, f"{__name__}:_zygote_main", (dict(env), serve), env)
        else:
            ctx = mp.get_context("spawn")
            self._ctl, child = ctx.Pipe()
            proc = ctx.Process(target=_zygote_main, args=(child, dict(env), serve), daemon=False,
                               name="specbench-vllm-zygote")
            proc.start()
            self.proc = proc
            child.close()
        self._lock = threading.Lock()  # one request on the pipe at a time (jobs run in threads)
        self._imported: bool | None = None
        self.children: list[ForkedProcess] = []
        self._live = LIVE.add(f"vLLM zygote (pid {self.proc.pid})", self.proc.kill)

    def settle(self, timeout: float) -> bool:
        """Wait until its import is done (at most ``timeout``); whether it can fork."""
        with self._lock:
            if self._imported is None:
                end = time.monotonic() + timeout
                while self._imported is None and time.monotonic() < end and self.proc.is_alive():
                    if self._ctl.poll(0.05):
                        try:
                            self._imported = bool(self._ctl.recv()[1])
                        except (EOFError, OSError):
                            self._imported = False
            return bool(self._imported) and self.proc.is_alive()

    def fork(self, conn: Any, args: tuple) -> ForkedProcess:
        with self._lock:
            self._ctl.send(("fork", *args))
            reduction.send_handle(self._ctl, conn.fileno(), self.proc.pid)
            _, pid = self._ctl.recv()
        child = ForkedProcess(pid, self)
        self.children = [c for c in self.children if c.is_alive()] + [child]
        return child

    def exitcode(self, pid: int) -> int | None:
        with self._lock:
            try:
                self._ctl.send(("exitcode", pid))
                return self._ctl.recv()[1]
            except (EOFError, OSError):
                return None

    def busy(self) -> bool:
        return any(c.is_alive() for c in self.children)

    def end(self) -> None:
        LIVE.discard(self._live)
        with self._lock:
            end_process(self.proc, self._ctl, ("close",), grace_s=2)
            self._ctl.close()


class Zygotes:
    """The zygotes of this process, by environment and cores (at most two: a run's engines share one)."""

    MAX = 2

    def __init__(self) -> None:
        self._all: dict[tuple, _Zygote] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(env: dict[str, str], python: str | None = None) -> tuple:
        """What a spawned engine would inherit: the environment (but pytest's per-test name, which
        only pytest reads; a forked worker takes the caller's environment exactly), cwd, cores, and
        the interpreter (None: this one)."""
        full = {k: v for k, v in {**os.environ, **env}.items() if k not in VOLATILE}
        return tuple(sorted(full.items())), os.getcwd(), tuple(sorted(os.sched_getaffinity(0))), python

    def prepare(self, env: dict[str, str], serve: Serve, python: str | None = None) -> None:
        """A zygote for engines with ``env`` (started now, importing while the caller goes on) whose
        forked workers run ``serve(conn, engine_kwargs, env)`` (a module-level function); ``python``:
        in that interpreter (an A/B arm's environment)."""
        key = self._key(env, python)
        with self._lock:
            z = self._all.pop(key, None)
            if z is not None:
                if z.proc.is_alive():
                    self._all[key] = z
                    return
                z.end()  # died (killed by a stop): out of the live list before its replacement
            for old_key, old in list(self._all.items()):
                if len(self._all) >= self.MAX and not old.busy():
                    del self._all[old_key]
                    old.end()
            self._all[key] = _Zygote(env, serve, python)

    def fork(self, env: dict[str, str], conn: Any, engine_kwargs: dict[str, Any], log_path: str, name: str,
             timeout: float, python: str | None = None) -> ForkedProcess | None:
        """A worker forked for this engine, or None (no zygote with its environment, cores and interpreter)."""
        key = self._key(env, python)
        with self._lock:
            z = self._all.get(key)
        if z is None or not z.settle(timeout):
            return None
        cpus = sorted(os.sched_getaffinity(0))
        environ = {**os.environ, **env}
        try:
            return z.fork(conn, (engine_kwargs, log_path, environ, name, cpus))
        except (EOFError, OSError):  # the zygote died (a stop killed it): the engine is spawned
            return None

    def settle(self, timeout: float) -> float:
        """Wait until no zygote is importing (it must not share the CPU with measured cells); seconds waited."""
        t0 = time.monotonic()
        with self._lock:
            zs = list(self._all.values())
        for z in zs:
            z.settle(max(0.0, timeout - (time.monotonic() - t0)))
        return time.monotonic() - t0

    def close(self, force: bool = False) -> None:
        """End every zygote with no live worker (all of them with ``force``: at exit)."""
        with self._lock:
            for key, z in list(self._all.items()):
                if force or not z.busy():
                    del self._all[key]
                    z.end()


ZYGOTES = Zygotes()
atexit.register(ZYGOTES.close, True)
