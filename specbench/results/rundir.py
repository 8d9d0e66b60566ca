"""The results directory: ``results/<suite>/<run-id>/``. This module is the one that opens its files:
every other module reads and writes them through the functions here, typed, and every read brings an
older file up to date (:mod:`specbench.results.migrations`).

* ``manifest.json`` — the suite as run, the plan, git commit, package
  versions, hardware, seed, schema version, engines (:class:`RunManifest`:
  :func:`read_manifest`, :func:`write_manifest`).
* ``records.jsonl`` / ``cells.jsonl`` — append-only raw records, one JSON
  object per line, flushed and fsynced per write, so an interrupted run
  loses at most the line being written (a torn last line is ignored on
  read -- and said: ``iter_jsonl(..., torn=notes)`` -- and repaired on resume)
  (:func:`read_requests`, :func:`read_cells`, :class:`JsonlAppender`).
* ``summary.json`` — derived; rebuilt by ``specbench analyze`` (:func:`read_summary`, :func:`write_summary`).
* ``prompts.jsonl`` — the prompts with their references (:func:`read_prompts`, :func:`write_prompts`);
  ``scores.jsonl`` — a cache of task scores (:func:`read_scores`, :func:`append_scores`);
  ``equivalence.jsonl`` — teacher-forced scores of sampled outputs, one :class:`ScoreRow` a line
  (:func:`read_equivalence_rows`; appended with :class:`JsonlAppender`, each row as it was set).
* ``engines/<key>.log`` — each engine's stdout/stderr, written by its process (:func:`engine_log`).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from specbench.errors import SpecbenchError
from specbench.results.manifest import RunManifest
from specbench.results.migrations import SchemaError
from specbench.results.records import SCHEMA_VERSION, CellRecord, RequestRecord
from specbench.results.requests import ScoreRow, StoredPrompt
from specbench.results.summary import RunSummary

RECORDS = "records.jsonl"
CELLS = "cells.jsonl"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
PROMPTS = "prompts.jsonl"  # inputs with references (written at run start)
SCORES = "scores.jsonl"  # derived task scores (a cache; rebuilt when deleted)
EQUIVALENCE = "equivalence.jsonl"  # teacher-forced scores of sampled outputs (specbench.execution.teacher_forcing)


ENGINE_LOGS = "engines"  # engines/<engine key>.log: each engine's stdout/stderr, written by its process


def engine_log(run_dir: str | Path, key: str) -> Path:
    """Where the engine ``key`` writes its log."""
    return Path(run_dir) / ENGINE_LOGS / f"{key}.log"


def engine_log_keys(run_dir: Path) -> list[str]:
    """The engine keys with a log in the run directory, sorted."""
    return sorted(p.name[: -len(".log")] for p in (Path(run_dir) / ENGINE_LOGS).glob("*.log"))


def read_engine_log(run_dir: Path, key: str) -> str:
    """An engine's log ("" when it has none)."""
    p = engine_log(run_dir, key)
    return p.read_text(errors="replace") if p.is_file() else ""


def reports_dir_for(run_dir: Path) -> Path:
    """Where a run's reports go by default: ``reports/`` beside the results root when that root is
    named ``results`` (``results/<suite>/<run-id>`` → ``reports/``), else inside it
    (``--out DIR``: ``DIR/<suite>/<run-id>`` → ``DIR/reports/``)."""
    root = Path(run_dir).parent.parent
    return root.parent / "reports" if root.name == "results" else root / "reports"


class StoreError(SpecbenchError, ValueError):
    """A run directory or stored file that cannot be read."""


def new_run_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid() % 10000:04d}"


class JsonlAppender:
    """Append-only JSONL writer: one line per call, flushed and fsynced."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        _repair_torn_tail(path)
        self._fh = open(path, "a", encoding="utf-8")

    def append(self, obj: BaseModel | dict) -> None:
        data = obj.model_dump(mode="json") if isinstance(obj, BaseModel) else obj
        self._fh.write(json.dumps(data, separators=(",", ":")) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def records_appender(run_dir: Path) -> JsonlAppender:
    """The run's ``records.jsonl``, opened for appending (a torn last line repaired first)."""
    return JsonlAppender(Path(run_dir) / RECORDS)


def cells_appender(run_dir: Path) -> JsonlAppender:
    """The run's ``cells.jsonl``, opened for appending."""
    return JsonlAppender(Path(run_dir) / CELLS)


def equivalence_appender(run_dir: Path) -> JsonlAppender:
    """The run's ``equivalence.jsonl``, opened for appending."""
    return JsonlAppender(Path(run_dir) / EQUIVALENCE)


def _repair_torn_tail(path: Path) -> None:
    """Cut a partial last line (a write interrupted mid-line) before appending.

    A last line that is whole but for its newline is kept (and ended), as the
    reader keeps it.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        data = path.read_bytes()
        cut = data.rfind(b"\n") + 1
        try:
            json.loads(data[cut:])
            fh.write(b"\n")
        except ValueError:
            fh.truncate(cut)


def iter_jsonl(path: Path, torn: list[str] | None = None, *, tail_may_tear: bool = True) -> Iterator[dict[str, Any]]:
    """The objects of a JSONL file (none when it does not exist): the one JSONL reader.

    Gzip-compressed when the name ends in ``.gz``. A corrupt line is a
    :class:`StoreError` (``file:line``), except a partial last line without
    its newline -- a write interrupted by a crash or a kill -- which is
    skipped and, when ``torn`` is given, said there as ``"<file>:<line>: …"``
    (with ``tail_may_tear=False``, for files nobody appends to, it is corrupt too).
    """
    for _, obj in iter_numbered_jsonl(path, torn, tail_may_tear=tail_may_tear):
        yield obj


def iter_numbered_jsonl(path: Path, torn: list[str] | None = None, *, tail_may_tear: bool = True,
                        bad: list[str] | None = None) -> Iterator[tuple[int, Any]]:
    """:func:`iter_jsonl` with each object's 1-based line number. With ``bad``, a corrupt line is
    said there (``"<file>:<line>: not JSON: …"``) and skipped instead of raising: a checker
    (``specbench validate``) reports every bad line of a file, not only the first."""
    path = Path(path)
    if not path.exists():
        return
    with (gzip.open if path.name.endswith(".gz") else open)(path, "rt", encoding="utf-8") as fh:
        lines = fh.readlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield i + 1, json.loads(line)
        except json.JSONDecodeError as exc:
            if tail_may_tear and i == len(lines) - 1 and not line.endswith("\n"):
                # torn last line of an interrupted run
                if torn is not None:
                    torn.append(f"{path.name}:{i + 1}: torn last line ({len(line.encode())} bytes, an "
                                "interrupted write) ignored")
                return
            if bad is None:
                raise StoreError(f"{path}:{i + 1}: corrupt record (invalid JSON)") from None
            bad.append(f"{path}:{i + 1}: not JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}")


def migrate(obj: dict[str, Any]) -> dict[str, Any]:
    """Bring an older record up to :data:`SCHEMA_VERSION` (none exist yet)."""
    v = obj.get("schema_version", 1)
    if v > SCHEMA_VERSION:
        raise StoreError(f"record schema {v} is newer than this specbench ({SCHEMA_VERSION}); upgrade specbench")
    return obj


def read_requests(run_dir: Path, torn: list[str] | None = None, *, speed_rounds: bool = False) -> list[RequestRecord]:
    """The run's request records: the suite's single pass; with ``speed_rounds``, also the headline's speed
    rounds on repeats of its prompts (``speed_only``: they count for the headline's speed alone)."""
    recs = (RequestRecord.model_validate(migrate(o)) for o in iter_jsonl(run_dir / RECORDS, torn))
    return [r for r in recs if speed_rounds or not r.speed_only]


def read_prompts(run_dir: Path, torn: list[str] | None = None) -> list[StoredPrompt]:
    """The run's prompts (``prompts.jsonl``; none when it has no such file)."""
    return [StoredPrompt.model_validate(o) for o in iter_jsonl(Path(run_dir) / PROMPTS, torn)]


def write_prompts(run_dir: Path, prompts: list[StoredPrompt]) -> None:
    """Write ``prompts.jsonl`` (atomically: a run's prompts are written once, before any engine)."""
    tmp = Path(run_dir) / (PROMPTS + ".tmp")
    tmp.write_text("".join(p.model_dump_json() + "\n" for p in prompts), encoding="utf-8")
    os.replace(tmp, Path(run_dir) / PROMPTS)


def prompt_categories(run_dir: Path) -> dict[tuple[str, str], str]:
    """(dataset, prompt id) → the prompt's category, from ``prompts.jsonl`` ({} without one)."""
    return {(p.dataset, p.prompt_id): str(c) for p in read_prompts(run_dir)
            if (c := p.meta.get("category")) is not None}


ScoreKey = tuple[str, str, int]  # (cell id, prompt id, sample index)


def read_scores(run_dir: Path, torn: list[str] | None = None) -> dict[ScoreKey, dict[str, Any]]:
    """The task scores cached in ``scores.jsonl``: (cell, prompt, sample) → metric → score."""
    return {(str(o["cell_id"]), str(o["prompt_id"]), int(o["sample_index"])): o["score"]
            for o in iter_jsonl(Path(run_dir) / SCORES, torn)}


def append_scores(run_dir: Path, scores: dict[ScoreKey, dict[str, Any]]) -> None:
    """Add scores to ``scores.jsonl`` (a cache: rebuilt when deleted)."""
    if not scores:
        return
    out = JsonlAppender(Path(run_dir) / SCORES)
    try:
        for (cid, pid, si), sc in scores.items():
            out.append({"cell_id": cid, "prompt_id": pid, "sample_index": si, "score": sc})
    finally:
        out.close()


def read_equivalence_rows(run_dir: Path, torn: list[str] | None = None) -> list[ScoreRow]:
    """The teacher-forced scores in ``equivalence.jsonl`` (none without the file; a torn last line of a killed
    run is skipped, said in ``torn``). The rows carry no version: every row written so far is a
    :class:`ScoreRow` as it is (see :mod:`specbench.results.migrations`)."""
    path = Path(run_dir) / EQUIVALENCE
    try:
        return [ScoreRow.model_validate(o) for o in iter_jsonl(path, torn)]
    except ValidationError as exc:
        raise StoreError(f"{path}: not an equivalence row: {exc.errors()[0]['msg']}") from None


def read_cells(run_dir: Path, torn: list[str] | None = None) -> list[CellRecord]:
    return [CellRecord.model_validate(migrate(o)) for o in iter_jsonl(run_dir / CELLS, torn)]


def write_json(path: Path, data: Any) -> None:
    """Write atomically (temp file + rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def read_manifest(run_dir: Path) -> RunManifest:
    """The run's manifest, typed (any stored schema version, brought up to date)."""
    p = Path(run_dir) / MANIFEST
    if not p.exists():
        raise StoreError(f"{run_dir}: not a specbench run directory (no {MANIFEST})")
    try:
        return RunManifest.load(json.loads(p.read_text()))
    except SchemaError as exc:
        raise StoreError(f"{p}: {exc}") from None


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    """Write ``manifest.json`` (atomically; see :meth:`RunManifest.stored` for what is written)."""
    write_json(Path(run_dir) / MANIFEST, manifest.stored())


def make_run_dir(run_dir: Path, *, resume: bool) -> None:
    """Create a new run's directory (an existing one is an error), or take a resumed run's as it is."""
    Path(run_dir).mkdir(parents=True, exist_ok=resume)


def has_manifest(run_dir: Path) -> bool:
    return (Path(run_dir) / MANIFEST).is_file()


def has_summary(run_dir: Path) -> bool:
    return (Path(run_dir) / SUMMARY).is_file()


def has_cells(run_dir: Path) -> bool:
    return (Path(run_dir) / CELLS).is_file()


def file_mtime(run_dir: Path, name: str) -> float | None:
    """When the run directory's file ``name`` (one of this module's file names: :data:`SUMMARY`, …) was last
    written (epoch seconds); None when the run has no such file."""
    p = Path(run_dir) / name
    return p.stat().st_mtime if p.is_file() else None


def read_summary(path: Path) -> RunSummary:
    """A stored summary (any schema version, brought up to date): a run directory's ``summary.json``,
    or such a file."""
    return read_summary_versioned(path)[0]


def read_summary_versioned(path: Path) -> tuple[RunSummary, int]:
    """:func:`read_summary` and the schema version the file was stored with."""
    path = Path(path)
    p = path / SUMMARY if path.is_dir() else path
    if not p.is_file():
        raise StoreError(f"{p}: no {SUMMARY} (run `specbench analyze {path}` first?)")
    try:
        data = json.loads(p.read_text())
        version = int(data.get("schema_version", 1)) if isinstance(data, dict) else 1
        return RunSummary.load(data), version
    except json.JSONDecodeError as exc:
        raise StoreError(f"{p}: invalid JSON: {exc}") from None
    except SchemaError as exc:
        raise StoreError(f"{p}: {exc}") from None


def write_summary(run_dir: Path, summary: RunSummary) -> None:
    write_json(Path(run_dir) / SUMMARY, summary.model_dump(mode="json"))
