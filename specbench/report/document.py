"""The report's document model: the blocks a renderer writes.

:mod:`specbench.report.markdown` and :mod:`specbench.report.method_sections` build
these; the Markdown writer and :mod:`specbench.report.html` render them. The
module imports no renderer, so every section builder can depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Para:
    text: str


@dataclass
class Pre:
    text: str


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Details:
    summary: str
    blocks: list[Block]


@dataclass
class Raw:
    """Markdown produced elsewhere (only the Markdown writer shows it)."""

    markdown: str


@dataclass
class Section:
    title: str
    blocks: list[Block]
    level: int = 2
    anchor: str = ""


Block = Para | Pre | Table | Details | Raw | Section


class Refs:
    """Numbers the published sources in order of first use."""

    def __init__(self) -> None:
        self.sources: list[str] = []

    def mark(self, source: str) -> str:
        if source not in self.sources:
            self.sources.append(source)
        return str(self.sources.index(source) + 1)
