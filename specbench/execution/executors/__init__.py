"""Executors run engine jobs and hand their events back to the driver.

``local`` (default): one job at a time in this process, every engine in its
own child process. ``ray``: each job is a Ray task holding the GPUs it needs,
as many at once as the cluster's free resources (and ``max_parallel``) allow.
Both call ``emit`` from the driver's main thread only, so the driver stays the
single writer of the run's files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from specbench.engines.kept import KeptEngines
from specbench.execution.jobs import EngineJob


class Executor(Protocol):
    name: str

    def check(self, jobs: Sequence[EngineJob]) -> list[str]:
        """Problems that make these jobs impossible here (e.g. a path the workers cannot see)."""

    def run(self, jobs: Sequence[EngineJob], emit: Callable[[Any], None]) -> None:
        """Run every job; returns when all have ended (each ends with a ``JobEnded`` event)."""

    def shutdown(self) -> None:
        """End every job and engine process still running (also on a stop signal)."""


def make_executor(name: str, *, ray_address: str | None = None, max_parallel: int | None = None,
                  kept: KeptEngines | None = None, round_hook: Any = None) -> Executor:
    """``kept`` (engines kept between runs in this process) and ``round_hook`` (an A/B run's decisions
    after each round) only apply to the local executor, whose engines are this process's children and
    alternate in it; a Ray cluster's engines live in its workers."""
    if name == "local":
        from specbench.execution.executors.local import LocalExecutor

        return LocalExecutor(kept=kept, round_hook=round_hook)
    if kept is not None:
        raise ValueError(f"engines are kept between runs by the local executor only, not by {name!r}")
    if round_hook is not None:
        raise ValueError(f"an A/B run alternates its arms' engines in one process: the local executor, not {name!r}")
    if name == "ray":
        from specbench.execution.executors.ray_executor import RayExecutor

        return RayExecutor(address=ray_address, max_parallel=max_parallel)
    raise ValueError(f"unknown executor {name!r} (local, ray)")
