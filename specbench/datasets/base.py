"""What every dataset kind's module builds on: rows that know where they came from, the kind's
interface (:class:`KindModule`), and the check ``specbench validate`` runs on a kind's data.

A kind module reads its rows (:meth:`KindModule.rows`), turns one row into a prompt
(:meth:`KindModule.prompt`, raising :class:`RowError` for a row it cannot use), says what the
dry run shows (:meth:`KindModule.plan_line`) and where the rows came from (:meth:`KindModule.source`).
The run and the check share that code: :meth:`KindModule.check` reads the same rows the run
reads and builds the same prompts, without a tokenizer, collecting every bad line as ``file:line``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import ValidationError

from specbench.config.dataset_kinds import DatasetKind
from specbench.config.suite import DatasetSpec, resolve_path
from specbench.errors import SpecbenchError
from specbench.results.requests import PreparedPrompt
from specbench.results.rundir import iter_numbered_jsonl
from specbench.results.slices import Slice

#: The most bad lines a check reports per dataset (then a count of the rest).
MAX_BAD_LINES = 20


class DatasetError(SpecbenchError, ValueError):
    """A dataset that cannot be read."""


class RowError(ValueError):
    """A row that cannot become a prompt (the caller adds where the row is)."""


@dataclass(frozen=True)
class Row:
    """One dataset row and where it is (``file:line``, ``file: row N`` or ``hub-id: row N``)."""

    where: str
    data: dict[str, Any]


@dataclass
class DataCheck:
    """What checking one dataset's data found: bad lines (``file:line: why``) and what was read."""

    dataset: str
    problems: list[str] = field(default_factory=list)
    read: str = ""  # e.g. 'chat.jsonl: 12 rows read, 3 prompts built'

    def add(self, problem: str) -> None:
        self.problems.append(problem)

    def shown(self) -> list[str]:
        """The problems to print, in line order: the first :data:`MAX_BAD_LINES`, then how many more."""
        out = sorted(self.problems, key=_place)[:MAX_BAD_LINES]
        if len(self.problems) > MAX_BAD_LINES:
            out.append(f"dataset {self.dataset!r}: … and {len(self.problems) - MAX_BAD_LINES} more bad lines")
        return out


def read_jsonl_rows(path: Path, bad: list[str] | None = None) -> list[Row]:
    """The rows of a local jsonl file (``.gz`` allowed) with their ``file:line``. Without ``bad`` the
    first invalid line raises :class:`DatasetError`; with it every invalid line is said there."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such dataset file")
    problems: list[str] = []
    rows: list[Row] = []
    try:
        for line, obj in iter_numbered_jsonl(path, tail_may_tear=False, bad=problems):
            if isinstance(obj, dict):
                rows.append(Row(f"{path}:{line}", obj))
            else:
                problems.append(f"{path}:{line}: not a JSON object (a {type(obj).__name__})")
    except (UnicodeDecodeError, OSError, EOFError) as exc:  # not UTF-8 text, or a broken .gz
        gz = "gzip-compressed " if path.name.endswith(".gz") else ""
        problems.append(f"{path}: cannot be read as {gz}UTF-8 text ({exc})")
    if bad is None and problems:
        raise DatasetError(min(problems, key=_place))
    if bad is not None:
        bad.extend(problems)
    return rows


_PLACE = re.compile(r"(?::|: row )(\d+): ")


def _place(problem: str) -> float:
    """The line (or row) a problem names; a whole-file problem first, a dataset-wide note last."""
    if problem.startswith("dataset "):
        return math.inf
    m = _PLACE.search(problem)
    return int(m.group(1)) if m else 0


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def packaged_path(relative: str) -> Path:
    """A file shipped inside this package (a real file of the installed package)."""
    return Path(str(resources.files("specbench.datasets").joinpath(relative)))


T = TypeVar("T")


def per_category(rows: list[T], n: int | None, category: Callable[[T], Any]) -> list[T]:
    """The first ``n`` rows of each category, in their order (all rows when ``n`` is None)."""
    if n is None:
        return rows
    seen: dict[Any, int] = {}
    out = []
    for r in rows:
        c = category(r)
        if seen.get(c, 0) < n:
            seen[c] = seen.get(c, 0) + 1
            out.append(r)
    return out


def select(spec: DatasetSpec, rows: list[T], category: Callable[[T], Any]) -> list[T]:
    """``categories``, ``per_category``, then ``offset`` and ``limit``: the rows a run uses."""
    if spec.categories:
        rows = [r for r in rows if category(r) in spec.categories]
    rows = per_category(rows, spec.per_category, category)[spec.offset:]
    return rows if spec.limit is None else rows[: spec.limit]


def messages(spec: DatasetSpec, content: str) -> list[dict[str, str]]:
    """The system prompt (if any), then ``content`` as the user message."""
    out = []
    if spec.system_prompt:
        out.append({"role": "system", "content": spec.system_prompt})
    out.append({"role": "user", "content": content})
    return out


def as_prompt(spec: DatasetSpec, chat: bool, pid: str, content: str, reference: Any = None,
              meta: dict[str, Any] | None = None) -> PreparedPrompt:
    """A one-turn prompt: chat messages, or the raw text when the target has no chat template."""
    try:
        if chat:
            return PreparedPrompt(prompt_id=pid, messages=messages(spec, content), reference=reference,
                                  meta=meta or {})
        return PreparedPrompt(prompt_id=pid, text=content, reference=reference, meta=meta or {})
    except ValidationError as exc:  # e.g. a reference field that is not text
        first = exc.errors()[0]
        raise RowError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def formatted(template: str, **fields: Any) -> str:
    """``template.format(**fields)``, a missing field or a broken template as a :class:`RowError`."""
    try:
        return template.format(**fields)
    except KeyError as exc:
        raise RowError(f"prompt_template names {{{exc.args[0]}}}, which the row lacks "
                       f"(it has {', '.join(sorted(fields)) or 'no fields'})") from None
    except (IndexError, ValueError, AttributeError, TypeError) as exc:
        raise RowError(f"prompt_template cannot be filled: {exc}") from None


def field_of(row: Row, name: str) -> Any:
    """A field the row must have."""
    if name not in row.data:
        raise RowError(f"no field {name!r}")
    return row.data[name]


def category_name(value: Any, what: str) -> str:
    """``value`` checked to be usable in a group id (letters, digits, _ . + -)."""
    try:
        return str(Slice(category=value).category)
    except ValueError:
        raise RowError(f"{what} must be a category name (letters, digits, _ . + -), got {value!r}") from None


class KindModule:
    """One dataset kind: how its rows are read and become prompts. Subclasses set :attr:`kind` and
    override :meth:`prompt`; the defaults read a local ``path`` as jsonl, the packaged copy from
    :attr:`packaged`, and the hub through ``datasets`` (imported only then)."""

    kind: ClassVar[DatasetKind]
    #: The shipped copy: (path inside specbench/datasets, licence), or None.
    packaged: ClassVar[tuple[str, str] | None] = None
    #: The hub dataset's config for the canonical hub id (None: none).
    hub_config: ClassVar[str | None] = None

    # ---- reading

    def rows(self, spec: DatasetSpec, base_dir: Path, bad: list[str] | None = None) -> list[Row]:
        """Every row of the dataset, in order. ``bad``: collect bad lines instead of raising."""
        if spec.path is not None:
            return self.file_rows(resolve_path(spec.path, base_dir), bad)
        if spec.source == "hub":
            return self.hub_rows(spec)
        return self.packaged_rows(spec, bad)

    def file_rows(self, path: Path, bad: list[str] | None) -> list[Row]:
        return read_jsonl_rows(path, bad)

    def packaged_file(self) -> Path:
        if self.packaged is None:
            raise DatasetError(f"no {self.kind.title} copy ships with specbench")
        return packaged_path(self.packaged[0])

    def packaged_rows(self, spec: DatasetSpec, bad: list[str] | None) -> list[Row]:
        if self.packaged is None:
            raise DatasetError(f"dataset {spec.name!r}: a {spec.kind} dataset needs a local 'path'")
        return read_jsonl_rows(self.packaged_file(), bad)

    def hub_id(self, spec: DatasetSpec) -> tuple[str | None, str | None]:
        """The hub dataset and its config for ``source: hub``."""
        if spec.hub_id is not None and spec.hub_id != self.kind.hub_id:
            return spec.hub_id, None
        return self.kind.hub_id, self.hub_config

    def hub_rows(self, spec: DatasetSpec) -> list[Row]:
        from datasets import load_dataset  # the real hub path, for users who have it

        hub_id, config = self.hub_id(spec)
        ds = load_dataset(hub_id, config, split=spec.split) if config else load_dataset(hub_id, split=spec.split)
        return [Row(f"{hub_id}: row {i + 1}", dict(r)) for i, r in enumerate(ds)]

    # ---- prompts

    def prompt(self, spec: DatasetSpec, row: Row, index: int, chat: bool) -> PreparedPrompt:
        """The prompt of one row (``index``: its position in the dataset, offset included)."""
        raise NotImplementedError

    def prompts(self, spec: DatasetSpec, base_dir: Path, chat: bool) -> list[PreparedPrompt]:
        """The prompts a run sends (the first bad row is a :class:`DatasetError` naming its line)."""
        out = []
        for row, p in self.each_prompt(spec, self.rows(spec, base_dir), chat):
            if isinstance(p, RowError):
                raise DatasetError(f"{row.where}: {p}")
            out.append(p)
        return out

    def each_prompt(self, spec: DatasetSpec, rows: list[Row],
                    chat: bool) -> Iterator[tuple[Row, PreparedPrompt | RowError]]:
        """Each row a run uses (``categories``, ``per_category``, ``offset``, ``limit``) with its prompt,
        or why it has none."""
        for i, row in enumerate(select(spec, rows, lambda r: r.data.get("category"))):
            try:
                yield row, self.prompt(spec, row, spec.offset + i, chat)
            except RowError as exc:
                yield row, exc

    def length_contexts(self, rows: list[dict[str, Any]]) -> list[Any]:
        """The contexts prompts of given lengths are cut from (kinds that build lengths)."""
        raise DatasetError(f"a {self.kind.name} dataset cannot build prompts of given lengths")

    def contexts(self, spec: DatasetSpec, rows: list[Row]) -> list[Any]:
        """The contexts a dataset with ``input_tokens`` cuts its prompts from: its ``categories``, then ``offset``."""
        data = [r.data for r in rows if not spec.categories or r.data.get("category") in spec.categories]
        return self.length_contexts(data)[spec.offset:]

    #: Prompts of given lengths are chat messages (False: raw completion prompts, like HumanEval's).
    length_prompts_chat: ClassVar[bool] = True

    # ---- checking, the dry run, the manifest

    def check(self, spec: DatasetSpec, base_dir: Path) -> DataCheck:
        """Read the data as a run would and build its prompts without a tokenizer; every bad line is
        a problem (``file:line: why``). A hub dataset is checked for its form only: no network."""
        out = DataCheck(spec.name)
        if spec.path is None and spec.source == "hub":
            hub_id, config = self.hub_id(spec)
            out.read = (f"the hub ({hub_id}{f', {config}' if config else ''}, split {spec.split}): form checked "
                        "only; its rows are read when the run starts")
            return out
        try:
            rows = self.rows(spec, base_dir, out.problems)
        except (DatasetError, FileNotFoundError) as exc:
            out.add(str(exc))
            return out
        built = self.check_prompts(spec, rows, out)
        where = spec.path if spec.path is not None else self.location()
        out.read = f"{where}: {len(rows)} rows read, " + (
            f"{built} contexts for the input lengths (the prompts are cut at run time, for the target's tokenizer)"
            if spec.input_tokens else f"{built} prompts built")
        return out

    def check_prompts(self, spec: DatasetSpec, rows: list[Row], out: DataCheck) -> int:
        """Build the prompts of the rows a run uses (of all ``rows`` read) as the run does; a bad row is a
        problem. Returns how many were built."""
        if spec.input_tokens:
            try:
                contexts = self.contexts(spec, rows)
            except (DatasetError, KeyError, TypeError, ValueError, AttributeError) as exc:
                out.add(f"dataset {spec.name!r}: its rows give no length contexts ({type(exc).__name__}: {exc})")
                return 0
            if not contexts:
                out.add(f"dataset {spec.name!r}: no contexts to build lengths from")
            return len(contexts)
        built = 0
        for row, p in self.each_prompt(spec, rows, chat=True):
            if isinstance(p, RowError):
                out.add(f"{row.where}: {p}")
            else:
                built += 1
        if not built and not out.problems:
            out.add(f"dataset {spec.name!r} yields no prompts")
        return built

    def plan_line(self, spec: DatasetSpec) -> str | None:
        """What the dry run says is sent, beyond the prompts as stored (None: nothing to add)."""
        return None

    def location(self) -> str:
        """The packaged copy, as the manifest names it."""
        return f"specbench/datasets/{self.packaged[0]}" if self.packaged else self.kind.title

    def source(self, spec: DatasetSpec, base_dir: Path) -> dict[str, Any]:
        """Where the rows come from, for the manifest (a file's sha256 included)."""
        if spec.path is not None:
            f = resolve_path(spec.path, base_dir)
            return {"source": "file", "location": str(f.resolve()), "sha256": sha256(f)}
        if spec.source == "hub":
            hub_id, config = self.hub_id(spec)
            return {"source": "hub", "location": hub_id, "config": config, "split": spec.split}
        assert self.packaged is not None
        return {"source": "package", "location": self.location(), "sha256": sha256(self.packaged_file()),
                "license": self.packaged[1]}
