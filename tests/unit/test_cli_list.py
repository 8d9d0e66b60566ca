"""``specbench list methods | datasets`` read well at 80 columns: the description keeps its width."""

from __future__ import annotations

from rich.console import Console

from specbench.cli import datasets_table, methods_table
from specbench.config.methods import METHODS
from specbench.datasets import DESCRIPTIONS


def _render(table, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    with console.capture() as cap:
        console.print(table)
    return [line.rstrip() for line in cap.get().splitlines()]


def _second_column(lines: list[str], names: list[str]) -> dict[str, list[str]]:
    """Each row's lines of the second column, keyed by the first column's name."""
    header = next(i for i, line in enumerate(lines) if "─" in line)
    body = [line for line in lines[header + 1:] if line.strip()]
    col = min(len(line) - len(line.lstrip()) for line in body if line.startswith(" " * 5))
    rows: dict[str, list[str]] = {}
    current = None
    for line in body:
        first = line[:col].strip()
        if first:
            assert first in names, line
            current = first
        rows.setdefault(current, []).append(line[col:].strip())
    return rows


def _assert_reads_well(lines: list[str], descriptions: dict[str, str]) -> dict[str, list[str]]:
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    rows = _second_column(lines, list(descriptions))
    assert list(rows) == list(descriptions)
    for name, text in descriptions.items():
        wrapped = rows[name][: len(rows[name]) - (1 if rows[name][-1] not in text else 0)]
        assert " ".join(wrapped) == text, (name, wrapped)
        # at most one short last line: the description column is over 60 characters wide
        assert len(wrapped) <= -(-len(text) // 60) + 1, (name, wrapped)
        assert all(len(line) >= 40 for line in wrapped[:-1]), (name, wrapped)
    return rows


def test_list_methods_at_80_columns():
    lines = _render(methods_table())
    rows = _assert_reads_well(lines, {m.name: m.description for m in METHODS.values()})
    facts = rows["dspark"][-1]
    assert "vLLM dspark" in facts and "needs a speculator" in facts and "max K 16" in facts and "cuda" in facts
    assert "no speculator" in rows["ngram"][-1]


def test_list_datasets_at_80_columns():
    _assert_reads_well(_render(datasets_table()), dict(DESCRIPTIONS))
