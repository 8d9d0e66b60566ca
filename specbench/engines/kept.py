"""Engines kept running between runs in one process: a seed sweep, a notebook, a test session.

Without it every run starts its engines and ends them (~20 s per vLLM start on
CPU). A :class:`KeptEngines` passed to ``api.run(keep=...)`` instead keeps each
engine that finished its job alive, and the next run whose engine has the same
*identity* -- engine kind, vLLM arguments, environment, load profile, server
address -- takes it over instead of starting one. An engine that died, was
killed (a stop signal) or failed is never kept. At most ``max_engines`` idle
engines are held (the least recently used is closed first), and none while the
machine has less than ``min_free_gib`` of memory available (an idle vLLM CPU
engine holds about 2 GiB); :meth:`close` ends them all (also at interpreter exit).

What a reused engine does not give a run: its own start (the manifest's engine
entry says ``kept_from``: the log of the run that started it) and an empty
prefix cache (vLLM's prefix cache keeps the earlier runs' prompts, as it does
between the cells of one run).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.util  # noqa: F401 - its exit hook joins live children: registered before ours, it runs after
from collections import OrderedDict
from typing import Any

from specbench.engines.factory import ResolvedEngine
from specbench.engines.loadgen import LoadProfile
from specbench.engines.procs import available_gib
from specbench.engines.protocol import Engine


def engine_identity(res: ResolvedEngine, load: LoadProfile | None) -> str:
    """What must match for a kept engine to serve a new job (per-run names and paths excluded)."""
    t = res.config.target
    return json.dumps(
        {"engine": t.engine, "base_url": t.base_url, "kwargs": res.engine_kwargs, "env": res.env,
         "speculator": res.speculator_path, "load": None if load is None else load.model_dump(mode="json"),
         # read by the engine itself: chat rendering options, and the method as the reference engine builds it
         "chat_template_kwargs": t.chat_template_kwargs, "method": res.config.method.model_dump(mode="json"),
         "speculative_config": res.config.speculative_config},
        sort_keys=True, default=str,
    )


class KeptEngines:
    """Idle engines by identity, least recently used first."""

    def __init__(self, max_engines: int = 4, min_free_gib: float = 4.0):
        self.max_engines = max_engines
        self.min_free_gib = min_free_gib
        self._idle: OrderedDict[str, tuple[Engine, str]] = OrderedDict()
        self.reused = 0  # engines taken over by a later job (for a test's or a benchmark's note)
        self.kept = 0
        atexit.register(self.close)

    def take(self, identity: str) -> tuple[Engine, str] | None:
        """A kept engine with ``identity`` that is still alive, and the log it was started with."""
        held = self._idle.pop(identity, None)
        if held is None:
            return None
        if not held[0].alive:
            held[0].kill()
            return None
        self.reused += 1
        return held

    def keep(self, identity: str, engine: Engine, log: str) -> bool:
        """Hold ``engine`` for a later job (False: it is not alive, the caller closes it)."""
        if not engine.alive or self.max_engines < 1 or available_gib() < self.min_free_gib:
            return False
        old = self._idle.pop(identity, None)
        if old is not None:
            old[0].close()
        self._idle[identity] = (engine, log)
        self.kept += 1
        while len(self._idle) > self.max_engines:
            _, (oldest, _) = self._idle.popitem(last=False)
            oldest.close()
        return True

    def __len__(self) -> int:
        return len(self._idle)

    def idle_engines(self) -> list[Engine]:
        """The engines held now, least recently used first (a benchmark drives a kept server with another
        client)."""
        return [engine for engine, _ in self._idle.values()]

    def close(self) -> None:
        """Close every idle engine, and the idle processes they leave (an engine host given back by a
        closed engine, a vLLM zygote with no engine left): nothing of theirs outlives the keeper."""
        from specbench.engines.child import close_hosts
        from specbench.engines.vllm_offline import close_zygotes

        idle, self._idle = list(self._idle.values()), OrderedDict()
        for engine, _ in idle:
            try:
                engine.close()
            except Exception:  # noqa: BLE001 - ending anyway
                engine.kill()
        if idle:
            close_hosts()
        close_zygotes()

    def __enter__(self) -> KeptEngines:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
