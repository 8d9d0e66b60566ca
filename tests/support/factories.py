"""Hand-built cells, records and summaries for the unit tests, in one place.

Every builder takes what a test cares about as keywords and gives the rest one default everywhere:
target ``t``, dataset ``d``, run ``r``, greedy, batch size 1, repeat 0. Ids follow the planner's own
spelling (``specbench.config.plan.group_id``): a cell ``t/eagle3/d/T0/b1/r0`` is in group
``t/eagle3/d/T0/b1``. A field the builder does not name passes through to the model (``**fields``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from support.paths import FIXTURES

from specbench.config.plan import Cell
from specbench.config.plan import group_id as planned_group_id
from specbench.results.manifest import RunManifest
from specbench.results.records import CellRecord, RequestRecord, SpecCounters
from specbench.results.summary import GroupSummary, RunSummary


def cell(method: str = "eagle3", kind: str | None = None, k: int | None = None, *, target: str = "t",
         dataset: str = "d", temperature: float = 0.0, batch_size: int = 1, repeat: int = 0,
         request_rate: float | None = None, cell_id: str | None = None, engine_key: str | None = None,
         **fields: Any) -> Cell:
    """A planned cell; ``kind`` (the registry's method name) defaults to ``method``, the id to its group's
    id and ``/r<repeat>``, the engine to ``<target>--<method>``."""
    gid = planned_group_id(target, method, dataset, temperature, batch_size, request_rate)
    return Cell(cell_id=f"{gid}/r{repeat}" if cell_id is None else cell_id,
                engine_key=f"{target}--{method}" if engine_key is None else engine_key, target=target,
                method=method, method_kind=method if kind is None else kind, k=k, dataset=dataset,
                temperature=temperature, batch_size=batch_size, repeat=repeat, request_rate=request_rate, **fields)


def counters(accepted: int = 0, drafts: int = 0, *, k: int = 3, per_position: list[int] | None = None) -> SpecCounters:
    """Spec-decode counters of ``drafts`` verification steps of ``k`` drafted tokens each."""
    return SpecCounters(num_drafts=drafts, num_draft_tokens=k * drafts, num_accepted_tokens=accepted,
                        accepted_per_pos=[] if per_position is None else per_position)


def request(cell: Cell | str = "c", prompt_id: str = "p0", *, tokens: int | list[int] = 10, run_id: str = "r",
            engine_key: str | None = None, prompt_tokens: int = 5, output_text: str = "",
            **fields: Any) -> RequestRecord:
    """One request's record in ``cell`` (a cell or its id). ``tokens``: the output ids, or their number
    (ids ``0..n-1``); the engine defaults to the cell's (``e`` for a bare id)."""
    cell_id, key = (cell.cell_id, cell.engine_key) if isinstance(cell, Cell) else (cell, "e")
    return RequestRecord(run_id=run_id, cell_id=cell_id, engine_key=key if engine_key is None else engine_key,
                         prompt_id=prompt_id, prompt_tokens=prompt_tokens,
                         output_token_ids=list(range(tokens)) if isinstance(tokens, int) else tokens,
                         output_text=output_text, **fields)


def cell_record(cell: Cell | str = "c", *, status: str = "ok", run_id: str = "r", engine_key: str | None = None,
                **fields: Any) -> CellRecord:
    """A cell's record (how it ended); the engine defaults to the cell's (``e`` for a bare id)."""
    cell_id, key = (cell.cell_id, cell.engine_key) if isinstance(cell, Cell) else (cell, "e")
    return CellRecord(run_id=run_id, cell_id=cell_id, engine_key=key if engine_key is None else engine_key,
                      status=status, **fields)


def group(method: str = "eagle3", kind: str | None = None, k: int | None = None, *, target: str = "t",
          dataset: str = "d", temperature: float = 0.0, batch_size: int = 1, status: str = "ok",
          group_id: str | None = None, **fields: Any) -> GroupSummary:
    """A group's summary with only the fields given; the id is the planner's (``group_id`` overrides it)."""
    gid = planned_group_id(target, method, dataset, temperature, batch_size, fields.get("request_rate"))
    return GroupSummary(group_id=gid if group_id is None else group_id, target=target, method=method,
                        method_kind=method if kind is None else kind, k=k, dataset=dataset,
                        temperature=temperature, batch_size=batch_size, status=status, **fields)


def run_summary(groups: Iterable[GroupSummary] = (), *, run_id: str = "r", suite_name: str = "s",
                **fields: Any) -> RunSummary:
    """A run's summary of ``groups`` (none: an empty run)."""
    return RunSummary(run_id=run_id, suite_name=suite_name, groups=list(groups), **fields)


def stored_summary(name: str = "full") -> RunSummary:
    """A committed summary fixture, ``tests/fixtures/summary_<name>.json``, read as the code reads it."""
    return RunSummary.load(json.loads((FIXTURES / f"summary_{name}.json").read_text()))


def stored_manifest(name: str = "full") -> RunManifest:
    """A committed manifest fixture, ``tests/fixtures/manifest_<name>.json``, read as the code reads it."""
    return RunManifest.load(json.loads((FIXTURES / f"manifest_{name}.json").read_text()))
