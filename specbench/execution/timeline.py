"""Recording where a run's wall time goes, while the run goes (issue 16).

A :class:`Timeline` collects :class:`~specbench.results.manifest.Span` s as they happen (``api.run``,
``analyze`` and ``report`` wrap their phases in :meth:`Timeline.span`; the engine jobs' timed phases
are added afterwards); :meth:`Timeline.breakdown` hands them to
:func:`specbench.analysis.timing.breakdown`, which defines how the wall is attributed to phases.
Spans carry wall-clock seconds (``time.time()``), the clock of the ISO timestamps in ``cells.jsonl``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from specbench.analysis.timing import breakdown
from specbench.results.manifest import Phase, Span, TimeBreakdown

__all__ = ["Timeline"]


@dataclass
class Timeline:
    """Records spans as they happen (thread-safe enough: ``list.append`` is atomic).

    ``with timeline.span("scoring"): ...`` records one span around a block, also when it raises;
    :meth:`add` records one measured elsewhere (an engine job's event).
    """

    started: float = 0.0
    spans: list[Span] | None = None

    def __post_init__(self) -> None:
        if not self.started:
            self.started = time.time()
        if self.spans is None:
            self.spans = []

    @contextlib.contextmanager
    def span(self, phase: Phase, engine: str | None = None, gpus: int | None = None,
             groups: list[str] | None = None) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            self.add(phase, start, time.time(), engine=engine, gpus=gpus, groups=groups)

    def add(self, phase: Phase, start: float, end: float, *, engine: str | None = None, gpus: int | None = None,
            groups: list[str] | None = None) -> Span:
        s = Span(phase=phase, start=start, end=end, engine=engine, gpus=gpus, groups=groups)
        assert self.spans is not None
        self.spans.append(s)
        return s

    def extend(self, spans: Iterable[Span]) -> None:
        assert self.spans is not None
        self.spans.extend(spans)

    def has(self, phase: str) -> bool:
        return any(s.phase == phase for s in self.spans or [])

    def breakdown(self, end: float | None = None, **kw: Any) -> TimeBreakdown:
        """The breakdown of the wall from :attr:`started` to ``end`` (now)."""
        end = time.time() if end is None else end
        return breakdown(self.spans or [], end - self.started, **kw)

    def to_json(self) -> list[dict[str, Any]]:
        return [s.model_dump(mode="json", exclude_none=True) for s in self.spans or []]
