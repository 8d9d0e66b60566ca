"""Rich progress bars on stderr (or nothing, when progress is off), and quiet speculators loading."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class _Null:
    def add_task(self, *a: Any, **k: Any) -> int:
        return 0

    def update(self, *a: Any, **k: Any) -> None:
        pass


@contextlib.contextmanager
def bar(enabled: bool) -> Iterator[Any]:
    """A ``rich.progress.Progress`` (or a no-op stand-in) for the zoo's training loops."""
    if not enabled:
        yield _Null()
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        console=Console(stderr=True),
    ) as p:
        yield p


@contextlib.contextmanager
def quiet_speculators() -> Iterator[None]:
    """Switch off speculators' loguru lines (one INFO line per file it loads) for the block."""
    from loguru import logger

    logger.disable("speculators")
    try:
        yield
    finally:
        logger.enable("speculators")
