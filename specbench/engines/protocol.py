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
from typing import Protocol, cast

from pydantic import BaseModel, ConfigDict

from specbench.config.methods import VllmPassthrough
from specbench.config.plan import EngineConfig
from specbench.results.records import RequestRecord
from specbench.results.requests import CellOutcome, CellRequest, ScoreItem, ScoreResult


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


class EngineCapabilities(BaseModel):
    """What an engine declares it can do; the runner asks these, never the engine's type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str  # the suite's ``target.engine``: "vllm-offline", "vllm-server", "reference"
    scores: bool = False  # teacher forcing (:meth:`Engine.score`)
    server: bool = False  # an HTTP server driven by a load generator (launched or attached)
    # Runs a cell of conversations (prompts with ``later_turns``) itself, each as one unit of its load, records
    # annotated with conversation and turn (the server: concurrency counts conversations); without it
    # execution.conversations sends the engine one turn of every conversation at a time.
    multi_turn: bool = False
    # Started with vLLM's sleep mode (``enable_sleep_mode``): :func:`sleeper` gives its ``sleep`` / ``wake_up``,
    # with which an A/B pair that does not fit on one GPU together takes turns (execution.rounds).
    sleeps: bool = False


class Engine(Protocol):
    """An engine's whole life: ``start`` → ``run_cell``/``score`` … → ``close``
    (or ``kill`` when the run stops); ``alive`` says whether it can take more work."""

    config: EngineConfig

    @property
    def capabilities(self) -> EngineCapabilities:
        """What this engine can do (fixed at construction)."""
        ...

    def start(self) -> None:
        """Start (raises :class:`EngineUnavailable`)."""

    def run_cell(self, request: CellRequest, emit: EmitRecord) -> CellOutcome:
        """Run one cell (raises :class:`CellFailed`)."""
        ...

    def score(self, items: list[ScoreItem]) -> list[ScoreResult]:
        """Teacher-force ``items``, one result each (raises :class:`CellFailed`; an engine
        without ``capabilities.scores`` raises it for every call)."""
        ...

    @property
    def alive(self) -> bool:
        """The engine is running and can take work."""
        ...

    def kill(self) -> None:
        """End the engine at once (a stop signal): no graceful shutdown."""

    def close(self) -> None:
        """End the engine gracefully (a no-op when it is not running)."""

    def describe(self) -> VllmPassthrough:
        """The exact configuration, for the manifest and --dry-run."""
        ...


class Sleeper(Protocol):
    """An engine that can free its accelerator for another and take it back (vLLM's sleep mode)."""

    def sleep(self) -> None:
        """Sleep at :data:`~specbench.config.arms.SLEEP_LEVEL` (raises :class:`CellFailed`)."""

    def wake_up(self) -> None:
        """Wake up from :meth:`sleep`, ready for requests (raises :class:`CellFailed`)."""


def sleeper(engine: Engine) -> Sleeper:
    """``engine`` as a :class:`Sleeper`: one whose capabilities say it sleeps (else :class:`CellFailed`)."""
    if not engine.capabilities.sleeps:
        raise CellFailed(f"engine {engine.config.key} ({engine.capabilities.kind}) was not started with vLLM's "
                         "sleep mode (enable_sleep_mode)")
    return cast(Sleeper, engine)


def cannot_score(engine: Engine) -> CellFailed:
    """The error an engine without ``capabilities.scores`` raises from :meth:`Engine.score`."""
    return CellFailed(f"engine {engine.config.key} ({engine.capabilities.kind}) cannot teacher-force")
