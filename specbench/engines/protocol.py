"""The engine protocol: what the runner asks of vLLM offline, vLLM server or
the reference simulator.

An engine is started once per :class:`~specbench.config.plan.EngineConfig` and runs
every cell that shares that configuration. It emits one
:class:`~specbench.results.records.RequestRecord` per request through a callback (so
the runner can append it to disk at once) and returns the cell's counter
delta.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from specbench.config.plan import EngineConfig
from specbench.results.records import RequestRecord
from specbench.results.requests import CellOutcome, CellRequest


class EngineUnavailable(Exception):
    """The engine could not start or died.

    ``skipped`` marks a configuration the engine cannot run here by design
    (e.g. DSpark on vLLM CPU): its cells are recorded as skipped with
    ``reason``, not failed.
    """

    def __init__(self, reason: str, *, skipped: bool = False, log_tail: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.skipped = skipped
        self.log_tail = log_tail


class CellFailed(Exception):
    """A cell failed while the engine may still be usable (or not: ``engine_dead``)."""

    def __init__(self, reason: str, *, engine_dead: bool = False, log_tail: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.engine_dead = engine_dead
        self.log_tail = log_tail


EmitRecord = Callable[[RequestRecord], None]


class Engine(Protocol):
    config: EngineConfig

    def start(self) -> None:
        """Start (raises :class:`EngineUnavailable`)."""

    def run_cell(self, request: CellRequest, emit: EmitRecord) -> CellOutcome:
        """Run one cell (raises :class:`CellFailed`)."""

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]:
        """The exact configuration, for the manifest and --dry-run."""
