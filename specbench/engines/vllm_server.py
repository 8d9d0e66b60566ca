"""vLLM server engine: launch (or attach to) an OpenAI-compatible vLLM server
and measure it from the client side.

Launch mode starts ``python -m vllm.entrypoints.openai.api_server`` on
127.0.0.1 and a free port, in its own process group (so stopping it takes its
EngineCore children too), with its output in ``log_path``; it gets SIGTERM,
and so shuts down with its EngineCore, if specbench dies
(:mod:`specbench.engines.procs`). Attach mode
(``base_url``) only measures a server someone else runs -- and checks that
it serves what the suite claims: the model (``/v1/models``) at start, and per
cell whether it speculates and with how many draft tokens (the spec-decode
counters of ``/metrics``: :func:`~specbench.engines.prom.served_mismatch`). A
mismatch fails the engine or the cell with the reason; what the server
reported is in :meth:`describe` (the manifest).

Per cell: optional warmup requests, a ``/metrics`` scrape, the load (see
:mod:`specbench.engines.loadgen`, each request streamed by
:mod:`specbench.engines.stream_client`), another scrape; the spec-decode counter
delta is the cell's counters. One :class:`RequestRecord` is emitted per
request sent, as soon as it finishes, errors included.
A cell of conversations (prompts with ``later_turns``) is run as
conversations: each holds one stream of the load for all its turns
(:mod:`specbench.engines.server_conversations`; ``capabilities.multi_turn``).

Faults: a server that fails to start raises :class:`EngineUnavailable` with
its log tail (``skipped=True`` when the error says the configuration is not
supported here); a server that dies mid-cell fails the cell with
``engine_dead=True`` after the records of everything sent so far were
emitted (in-flight requests with ``error`` set); requests not yet sent are
not recorded. A signal whose handler raises (a run being stopped) ends the
cell within moments: requests that completed were emitted, those it cut
short are not (they are sent again on resume), and the handler's exception
leaves ``run_cell`` (see :func:`specbench.engines.signal_safe_loop.run_keeping_signals`). Start-up helpers
(the port, the readiness probe, the reason a start failed) are in :mod:`specbench.engines.server_startup`.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from specbench.config.arms import SLEEP_LEVEL
from specbench.config.methods import VllmPassthrough
from specbench.config.plan import EngineConfig
from specbench.engines.interpreter import executable
from specbench.engines.loadgen import FollowUp, LoadProfile, LoadReport, run_load, run_warmup
from specbench.engines.piped_engine import tail
from specbench.engines.procs import LIVE, descendants, kill_tree, pdeathsig_preexec
from specbench.engines.prom import CounterReset, PromSnapshot, scrape_settled, served_mismatch
from specbench.engines.protocol import (
    CellFailed,
    EmitRecord,
    EngineCapabilities,
    EngineUnavailable,
    cannot_score,
)
from specbench.engines.server_conversations import ConversationLoad
from specbench.engines.server_startup import HOST, free_port, http_get, start_failure
from specbench.engines.signal_safe_loop import run_keeping_signals
from specbench.engines.stream_client import RequestItem, RequestResult, build_item, make_session, to_record
from specbench.engines.vllm_args import num_speculative_tokens, server_argv
from specbench.results.requests import (
    CellOutcome,
    CellRequest,
    PreparedPrompt,
    ScoreItem,
    ScoreResult,
    is_conversations,
)
from specbench.settings import settings


class VllmServerEngine:
    """A vLLM OpenAI-compatible server, launched here or attached to via ``base_url``.

    ``server_args`` is the same dict :func:`~specbench.engines.vllm_args.build_engine_kwargs`
    makes for ``vllm.LLM``; it becomes the server's command line. ``load``
    gives every cell its bounds, warmup and seed (``run_cell(..., load=…)``
    replaces the whole profile for one call); the load shape comes from the
    cell: ``concurrency = cell.batch_size``, or Poisson arrivals at
    ``cell.request_rate`` capped at ``cell.batch_size`` in flight when > 0.
    """

    def __init__(
        self,
        config: EngineConfig,
        server_args: dict[str, Any],
        log_path: Path,
        env: dict[str, str],
        base_url: str | None = None,
        *,
        load: LoadProfile | None = None,
        start_timeout_s: float | None = None,
    ):
        self.config = config
        self.server_args = dict(server_args)
        self.log_path = Path(log_path)
        self.env = dict(env)
        self.attach_url = base_url.rstrip("/") if base_url else None
        self.load = load
        self.start_timeout_s = settings().engine_start_timeout if start_timeout_s is None else start_timeout_s
        self.base_url: str | None = self.attach_url
        self.model_name: str | None = None
        self.command: list[str] | None = None
        self.last_cell: dict[str, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._atexit_registered = False
        self._live: int | None = None  # this server's entry in procs.LIVE
        # Attach mode: what the server reported (/v1/models) and what its counters said of the claim.
        self.served: dict[str, Any] = {}
        self.k: int | None = num_speculative_tokens(self.server_args) or num_speculative_tokens(
            {"speculative_config": config.speculative_config})

    # -- lifecycle ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The server's process id (also its process group id); ``None`` in attach mode."""
        return self._proc.pid if self._proc is not None else None

    def describe(self) -> VllmPassthrough:
        return {
            "engine": "vllm-server",
            "mode": "attach" if self.attach_url else "launch",
            "base_url": self.base_url,
            "command": self.command or self.server_command(0),
            "server_args": self.server_args,
            "env": self.env,
            **({"served": self.served} if self.attach_url else {}),
        }

    def server_command(self, port: int) -> list[str]:
        """The command that starts the server on ``port`` (tests substitute a fake)."""
        python = executable(self.config.target.python) if self.config.target.python else sys.executable
        return [*server_argv(self.server_args, python), "--host", HOST, "--port", str(port)]

    def start(self) -> None:
        if self.attach_url is not None:
            self._wait_ready(self.attach_url, proc=None)
            self.model_name = self._fetch_model(self.attach_url)
            why = self._model_mismatch()
            if why is not None:
                raise EngineUnavailable(f"attached server at {self.attach_url} does not serve the suite's target: {why}")
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for _attempt in range(3):
            port = free_port()
            url = f"http://{HOST}:{port}"
            self.command = self.server_command(port)
            mark = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:
                log.write(f"\n[specbench] starting: {' '.join(self.command)}\n".encode())
                log.flush()
                env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
                self._proc = subprocess.Popen(
                    self.command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                    # SIGTERM, not SIGKILL, if specbench dies: the server's own shutdown then ends its
                    # EngineCore, which a SIGKILLed server would orphan (a child does not inherit PDEATHSIG).
                    preexec_fn=pdeathsig_preexec(signal.SIGTERM),
                )
            LIVE.discard(self._live)
            self._live = LIVE.add(f"vllm server {self.config.key} (pid {self._proc.pid})", self._end_now)
            if not self._atexit_registered:
                atexit.register(self.close)
                self._atexit_registered = True
            try:
                self._wait_ready(url, proc=self._proc)
            except EngineUnavailable as exc:
                new_log = self._log_since(mark)
                self._stop()
                if "address already in use" in new_log.lower():
                    continue  # lost the race for the port: try another
                raise exc
            self.base_url = url
            self.model_name = self._fetch_model(url)
            return
        raise EngineUnavailable(
            "server could not bind a free port (3 attempts)", log_tail=tail(self.log_path)
        )

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _wait_ready(self, url: str, proc: subprocess.Popen[bytes] | None) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if proc is not None and proc.poll() is not None:
                reason, unsupported = start_failure(tail(self.log_path, 20000))
                raise EngineUnavailable(
                    f"vLLM server exited during start-up (exit code {proc.returncode}): {reason}",
                    skipped=unsupported,
                    log_tail=tail(self.log_path),
                )
            status, _ = http_get(url + "/health", timeout_s=2.0)
            if status == 200:
                return
            if time.monotonic() > deadline:
                what = "start" if proc is not None else "answer /health"
                raise EngineUnavailable(
                    f"vLLM server at {url} did not {what} within {self.start_timeout_s:.0f} s",
                    log_tail=tail(self.log_path) if proc is not None else None,
                )
            time.sleep(0.5)

    def _fetch_model(self, url: str) -> str:
        status, body = http_get(url + "/v1/models", timeout_s=10.0)
        if status == 200:
            try:
                data = json.loads(body)["data"]
                self.served["models"] = [
                    {k: m.get(k) for k in ("id", "root", "max_model_len")} for m in data if isinstance(m, dict)
                ]
                return str(data[0]["id"])
            except (ValueError, KeyError, IndexError, TypeError):
                pass
        # Fall back to what the server was told to serve.
        return str(
            self.server_args.get("served_model_name")
            or self.server_args.get("model")
            or self.config.target.model
        )

    def _model_mismatch(self) -> str | None:
        """The attached server's models (id or root, or their last path part) against the claim."""
        models = self.served.get("models")
        if not models:
            self.served["model_check"] = "unverified: /v1/models gave no model"
            return None
        claimed = {
            str(x).rstrip("/")
            for x in (self.server_args.get("served_model_name"), self.server_args.get("model"), self.config.target.model)
            if x
        }
        served = {str(m[k]).rstrip("/") for m in models for k in ("id", "root") if m.get(k)}
        if claimed & served or {os.path.basename(x) for x in claimed} & {os.path.basename(x) for x in served}:
            self.served["model_check"] = "ok"
            return None
        why = f"it serves {sorted(served)}, the suite claims {sorted(claimed)}"
        self.served["model_check"] = "mismatch: " + why
        return why

    def _check_claim(self, before: PromSnapshot | None, after: PromSnapshot | None, prom_error: str | None) -> None:
        """Attach mode: does the cell's /metrics delta fit the method and K the suite claims?"""
        if before is None or after is None:
            self.served["metrics_check"] = f"unverified: {prom_error or 'no /metrics scrape'}"
            return
        k = self.k if self.config.speculative_config is not None else None
        why = served_mismatch(k, before, after)
        self.served["metrics_check"] = "ok" if why is None else "mismatch: " + why
        if why is not None:
            raise CellFailed(f"attached server does not serve the suite's method: {why}")

    @property
    def capabilities(self) -> EngineCapabilities:
        return EngineCapabilities(kind="vllm-server", server=True, multi_turn=True,
                                  sleeps=bool(self.server_args.get("enable_sleep_mode")))

    def _dev_post(self, path: str) -> None:
        """POST to one of vLLM's development endpoints (served with ``VLLM_SERVER_DEV_MODE=1``)."""
        request = urllib.request.Request(f"{self.base_url}{path}", data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=settings().cell_timeout):  # noqa: S310 - loopback/user URL
                return
        except urllib.error.HTTPError as exc:
            why = " (vLLM serves it with VLLM_SERVER_DEV_MODE=1 and enable_sleep_mode)" if exc.code == 404 else ""
            raise CellFailed(f"POST {path}: HTTP {exc.code}{why}", log_tail=self._tail()) from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise CellFailed(f"POST {path}: {exc}", engine_dead=not self.alive, log_tail=self._tail()) from None

    def sleep(self) -> None:
        """The server's ``POST /sleep`` at :data:`~specbench.config.arms.SLEEP_LEVEL`."""
        self._dev_post(f"/sleep?level={SLEEP_LEVEL}")

    def wake_up(self) -> None:
        self._dev_post("/wake_up")

    @property
    def alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        if self.attach_url is not None:
            return http_get(self.attach_url + "/health", timeout_s=2.0)[0] == 200
        return False

    def kill(self) -> None:
        """SIGKILL the whole server process group and every descendant (fault injection, a stopped run)."""
        if self._proc is not None:
            kill_tree(self._proc.pid)

    def _end_now(self) -> None:
        """SIGKILL everything and reap the server (a stopped run's last resort: no grace)."""
        if self._proc is not None:
            kill_tree(self._proc.pid)
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass

    def _signal_group(self, sig: int) -> bool:
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def _stop(self) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to the server's process group; then
        SIGKILL to whatever of the group or of the server's descendants is left."""
        if self._proc is None:
            return
        children = descendants(self._proc.pid)  # collected now: once the server is gone they are no one's
        for sig, wait_s in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            if self._proc.poll() is not None:
                break
            self._signal_group(sig)
            try:
                self._proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # Whatever outlived the leader (e.g. an EngineCore) goes too.
        kill_tree(self._proc.pid, also=children)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._proc = None
        LIVE.discard(self._live)
        self._live = None

    def close(self) -> None:
        if self._proc is not None:
            self._stop()
        if self._atexit_registered:
            atexit.unregister(self.close)
            self._atexit_registered = False

    def score(self, items: list[ScoreItem]) -> list[ScoreResult]:
        raise cannot_score(self)

    # -- cells -------------------------------------------------------------

    def profile_for(self, request: CellRequest, load: LoadProfile | None = None) -> LoadProfile:
        """The load profile for a cell.

        ``load`` (an explicit per-call profile) is used as given. Otherwise the
        cell says the shape (:meth:`LoadProfile.for_cell`: its request rate,
        capped at ``batch_size`` in flight, or ``concurrency = batch_size``)
        and the engine default (bounds, warmup, seed) the rest; the seed is
        mixed with the cell's repeat.
        """
        if load is not None:
            return load
        return LoadProfile.for_cell(request.cell, self.load or LoadProfile(request_timeout_s=settings().request_timeout))

    def items_for(self, request: CellRequest) -> list[RequestItem]:
        return [
            self._item(request, p, s)
            for p in request.prompts
            for s in range(request.sampling.samples_per_prompt)
            if (p.prompt_id, s) not in request.skip
        ]

    def _item(self, request: CellRequest, prompt: PreparedPrompt, sample: int = 0) -> RequestItem:
        assert self.model_name is not None
        return build_item(prompt, request.sampling, self.model_name, sample=sample, repeat=request.cell.repeat,
                          chat_template_kwargs=self.config.target.chat_template_kwargs or None)

    def run_cell(
        self, request: CellRequest, emit: EmitRecord, load: LoadProfile | None = None
    ) -> CellOutcome:
        if self.base_url is None or (self._proc is not None and self._proc.poll() is not None):
            raise CellFailed("vLLM server is not running", engine_dead=True, log_tail=self._tail())
        profile = self.profile_for(request, load)
        convs = ConversationLoad(request, lambda p: self._item(request, p)) if is_conversations(request.prompts) else None
        items = convs.items() if convs is not None else self.items_for(request)
        emitted: list[RequestResult] = []
        stopping: list[bool] = []

        def on_result(res: RequestResult) -> None:
            if stopping and not res.ok:
                return  # cut short by the run's stop, not a server failure: sent again on resume
            emitted.append(res)
            rec = to_record(res, run_id=request.run_id, cell=request.cell, engine_key=self.config.key, k=self.k,
                            method=(self.config.speculative_config or {}).get("method"))
            emit(convs.annotate(rec) if convs is not None else rec)

        report, before, after, prom_error = run_keeping_signals(
            self._cell(items, profile, on_result, convs.follow_up if convs is not None else None),
            on_stop=lambda: stopping.append(True),
        )
        errors = report.error_counts()
        self.last_cell = {
            "cell_id": request.cell.cell_id,
            "profile": profile.model_dump(),
            "requests": len(report.results),
            "errors": errors,
            "not_sent": report.not_sent,
            "wall_time_s": report.wall_time_s,
            "aborted": report.aborted,
        }
        if report.aborted is not None or not self.alive:
            done = sum(r.ok for r in report.results)
            raise CellFailed(
                f"vLLM server died during the cell ({report.aborted or 'not alive'}): {done} requests completed, "
                f"{len(report.results) - done} recorded with errors {errors}, {report.not_sent} not sent",
                engine_dead=True,
                log_tail=self._tail(),
            )
        if report.results and not any(r.ok for r in report.results):
            raise CellFailed(
                f"all {len(report.results)} requests failed: {errors}; first: {report.results[0].error}",
                engine_dead="timeout" in errors,
                log_tail=self._tail(),
            )
        counters = None
        if self.config.speculative_config is not None:
            if prom_error is not None:
                raise CellFailed(f"spec-decode counters unavailable: {prom_error}", log_tail=self._tail())
            if before is not None and after is not None:
                try:
                    delta = after - before
                except CounterReset as exc:
                    raise CellFailed(str(exc), log_tail=self._tail()) from exc
                counters = delta.spec
                self.last_cell["prom_totals"] = delta.totals
        if self.attach_url is not None:
            self._check_claim(before, after, prom_error)
        return CellOutcome(counters=counters, wall_time_s=report.wall_time_s, num_requests=len(emitted))

    async def _cell(
        self, items: list[RequestItem], profile: LoadProfile, on_result: Any, follow_up: FollowUp | None = None
    ) -> tuple[LoadReport, PromSnapshot | None, PromSnapshot | None, str | None]:
        assert self.base_url is not None
        url = self.base_url
        abort = asyncio.Event()
        dead_reason: list[str] = []

        async def watchdog() -> None:
            while self._proc is not None:
                if self._proc.poll() is not None:
                    dead_reason.append(f"server process exited with code {self._proc.returncode}")
                    abort.set()
                    return
                await asyncio.sleep(0.1)

        async def check_alive() -> bool:
            if self._proc is not None:
                await asyncio.sleep(0.2)  # let the watchdog see a dying process
                return self._proc.poll() is None
            loop = asyncio.get_running_loop()
            status, _ = await loop.run_in_executor(None, http_get, url + "/health", 2.0)
            return status == 200

        async with make_session(profile.concurrency) as session:
            dog = asyncio.create_task(watchdog())
            try:
                if profile.warmup_requests:
                    await run_warmup(
                        session,
                        url,
                        items,
                        profile.warmup_requests,
                        profile.concurrency or 1,
                        profile.request_timeout_s,
                    )
                prom_error = None
                before = after = None
                try:
                    before = await scrape_settled(session, url)
                except Exception as exc:  # noqa: BLE001 - a server without /metrics still gets measured
                    prom_error = f"{type(exc).__name__}: {exc}"
                proc = self._proc
                report = await run_load(
                    session,
                    url,
                    items,
                    profile,
                    on_result,
                    abort=abort,
                    check_alive=check_alive,
                    alive_hint=(lambda: proc.poll() is None) if proc is not None else None,
                    follow_up=follow_up,
                )
                if dead_reason and report.aborted:
                    report.aborted = dead_reason[0]
                if report.aborted is None and prom_error is None:
                    try:
                        after = await scrape_settled(session, url)
                    except Exception as exc:  # noqa: BLE001
                        prom_error = f"{type(exc).__name__}: {exc}"
            finally:
                dog.cancel()
        return report, before, after, prom_error

    def _tail(self) -> str | None:
        return tail(self.log_path) if self.attach_url is None else None
