"""Any in-process engine, run in a child process (``ChildEngine``).

The reference engine loads transformers models; run inside the driver, a run's
own process would hold them and a crash in them would end the run. The child
builds the engine from an importable class and its arguments, and answers
``start`` / ``cell`` / ``score`` / ``close`` over a pipe, forwarding each request record
as it is produced.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing as mp
import multiprocessing.util  # noqa: F401 - its exit hook joins live children: registered before ours, it runs after
import os
import traceback
from pathlib import Path
from typing import Any

from specbench.config.methods import VllmPassthrough
from specbench.config.plan import EngineConfig
from specbench.engines.piped_engine import PipedEngine, tail
from specbench.engines.procs import LIVE, end_process
from specbench.engines.protocol import (
    CellFailed,
    EmitRecord,
    EngineCapabilities,
    EngineUnavailable,
    cannot_score,
)
from specbench.engines.vllm_forks import _as_worker, _log_to
from specbench.results.records import RequestRecord
from specbench.results.requests import CellOutcome, CellRequest, ScoreItem, ScoreResult
from specbench.settings import settings


def _serve(conn: Any, target: str, args: tuple) -> bool:
    """One engine's life in the host: build, start, cells, close. False when the host must end."""
    module, _, name = target.partition(":")
    try:
        engine = getattr(importlib.import_module(module), name)(*args)
        engine.start()
    except EngineUnavailable as exc:
        conn.send(("start_error", {"reason": exc.reason, "skipped": exc.skipped, "log_tail": exc.log_tail}))
        return True
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        conn.send(("start_error", {"reason": f"{type(exc).__name__}: {exc}", "skipped": False, "log_tail": None}))
        return True
    conn.send(("ready", engine.describe()))
    while True:
        msg = conn.recv()
        if msg[0] == "close":
            engine.close()
            conn.send(("closed", None))
            return True
        if msg[0] == "score":
            try:
                results = engine.score([ScoreItem.model_validate(d) for d in msg[1]])
            except CellFailed as exc:
                conn.send(("cell_failed", {"reason": exc.reason, "engine_dead": exc.engine_dead, "log_tail": exc.log_tail}))
                continue
            conn.send(("scored", [r.model_dump(mode="json") for r in results]))
            continue
        request = CellRequest.model_validate(msg[1])
        try:
            outcome = engine.run_cell(request, lambda r: conn.send(("record", r.model_dump(mode="json"))))
        except CellFailed as exc:
            conn.send(("cell_failed", {"reason": exc.reason, "engine_dead": exc.engine_dead, "log_tail": exc.log_tail}))
            continue
        except Exception as exc:  # noqa: BLE001 - the cell fails, the engine lives on
            traceback.print_exc()
            conn.send(("cell_failed", {"reason": f"{type(exc).__name__}: {exc}", "engine_dead": False, "log_tail": None}))
            continue
        conn.send(("done", {"outcome": outcome.model_dump(mode="json"), "describe": engine.describe()}))


def _child_main(conn: Any) -> None:
    """A host process: serves one engine after another (imports paid once), each logging to its own file."""
    _as_worker()  # dies with the run
    while True:
        msg = conn.recv()
        if msg[0] != "build":
            return
        _, target, args, log_path = msg
        _log_to(log_path)
        print(f"specbench-engine pid={os.getpid()}", flush=True)
        _serve(conn, target, args)


class _Hosts:
    """At most one idle host process per engine class, reused by the next engine of that class;
    :func:`close_hosts` (the local executor's shutdown, and at exit) ends them."""

    def __init__(self) -> None:
        self._idle: dict[str, tuple[Any, Any, int | None]] = {}

    def take(self, target: str) -> tuple[Any, Any, int | None] | None:
        host = self._idle.pop(target, None)
        if host is not None and host[0].is_alive():
            return host
        if host is not None:
            LIVE.discard(host[2])
        return None

    def give_back(self, target: str, proc: Any, conn: Any, live: int | None) -> None:
        old = self._idle.pop(target, None)
        self._idle[target] = (proc, conn, live)
        if old is not None:
            self._end(old)

    def close(self) -> None:
        idle, self._idle = list(self._idle.values()), {}
        for host in idle:
            self._end(host)

    @staticmethod
    def _end(host: tuple[Any, Any, int | None]) -> None:
        proc, conn, live = host
        end_process(proc, conn, ("end",), grace_s=5)
        LIVE.discard(live)


_HOSTS = _Hosts()
atexit.register(_HOSTS.close)


def close_hosts() -> None:
    """End the idle engine hosts (a run's engines are done)."""
    _HOSTS.close()


class ChildEngine(PipedEngine):
    """``ChildEngine(config, log_path, "module:Class", args, capabilities)``: ``Class(*args)`` in a
    child process; ``capabilities`` are those of ``Class`` (declared by the factory, which knows it)."""

    def __init__(self, config: EngineConfig, log_path: Path, target: str, args: tuple,
                 capabilities: EngineCapabilities):
        self.config = config
        self._capabilities = capabilities
        self.log_path = Path(log_path)
        self._target = target
        self._args = args
        self._proc: Any = None
        self._conn: Any = None
        self._describe: VllmPassthrough = {}
        self._live: int | None = None  # this child's entry in procs.LIVE

    @property
    def capabilities(self) -> EngineCapabilities:
        return self._capabilities

    def describe(self) -> VllmPassthrough:
        return dict(self._describe)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        host = _HOSTS.take(self._target)
        if host is not None:
            self._proc, self._conn, self._live = host
        else:
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            self._proc = ctx.Process(target=_child_main, args=(child,), name=f"specbench-engine-{self.config.key}")
            self._proc.start()
            self._live = LIVE.add(f"engine host (pid {self._proc.pid})", self._proc.kill)
            child.close()
            self._conn = parent
        self._conn.send(("build", self._target, self._args, str(self.log_path)))
        kind, payload = self._recv(settings().engine_start_timeout, starting=True)
        if kind == "start_error":
            self._release()
            raise EngineUnavailable(payload["reason"], skipped=payload["skipped"],
                                    log_tail=payload["log_tail"] or tail(self.log_path))
        self._describe = payload

    def run_cell(self, request: CellRequest, emit: EmitRecord) -> CellOutcome:
        self._require_running()
        self._conn.send(("cell", request.model_dump(mode="json")))
        while True:
            kind, payload = self._recv(settings().cell_timeout)
            if kind == "record":
                emit(RequestRecord.model_validate(payload))
            elif kind == "done":
                self._describe = payload["describe"]
                return CellOutcome.model_validate(payload["outcome"])
            elif kind == "cell_failed":
                raise CellFailed(payload["reason"], engine_dead=payload["engine_dead"],
                                 log_tail=payload["log_tail"] or tail(self.log_path))

    def score(self, items: list[ScoreItem]) -> list[ScoreResult]:
        if not self._capabilities.scores:
            raise cannot_score(self)
        self._require_running()
        self._conn.send(("score", [it.model_dump(mode="json") for it in items]))
        kind, payload = self._recv(settings().cell_timeout)
        if kind == "cell_failed":
            raise CellFailed(payload["reason"], engine_dead=payload["engine_dead"],
                             log_tail=payload["log_tail"] or tail(self.log_path))
        return [ScoreResult.model_validate(r) for r in payload]

    def kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=10)
        self._proc = None
        LIVE.discard(self._live)
        self._live = None

    def _gone(self) -> None:
        self.kill()

    def _release(self) -> None:
        """The host process goes back to the pool for the next engine of this class."""
        if self._proc is not None and self._proc.is_alive():
            _HOSTS.give_back(self._target, self._proc, self._conn, self._live)
        else:
            LIVE.discard(self._live)
        self._proc = None
        self._live = None

    def close(self) -> None:
        if self._proc is None:
            return
        try:
            if self._proc.is_alive():
                self._conn.send(("close",))
                if self._conn.poll(30) and self._conn.recv()[0] == "closed":
                    self._release()
                    return
        except (OSError, EOFError, BrokenPipeError):
            pass
        self.kill()
