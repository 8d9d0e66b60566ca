"""The house's rules (issue 49), each one a test over the source, so that docs/architecture.md's claims stay true.

* one name per thing: no two modules share a basename (a dataset's own modules, ``datasets/gsm8k.py`` beside
  ``scoring/gsm8k.py``, excepted), and no two public top-level functions or classes share a name;
* units of a readable size: no function over 100 lines, no module over 600;
* typed contracts: analysis/ sets no attribute by name (``setattr``); no stored model has a field of
  ``dict[str, Any]`` or ``Any`` (its nested models included);
* one package opens a run directory's files: outside ``specbench/results/`` no path is built from a run
  directory's file names and nothing is read or written through a ``run_dir``;
* renderers compute no metric: report/ imports no numeric library, takes only types, constants and
  formatters from the stages that compute, and divides only for layout (a list of the divisions it has);
* every code path the docs cite exists.

The CLI's rule (it imports only ``api`` and ``errors``) is tests/unit/test_api_surface.py's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import typing
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support.paths import PACKAGE, REPO

MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 600


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(p: Path) -> str:
    return str(p.relative_to(REPO))


def _trees() -> Iterator[tuple[Path, ast.Module]]:
    for p in _modules():
        yield p, ast.parse(p.read_text(encoding="utf-8"), filename=str(p))


def _stage(p: Path) -> str:
    parts = p.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else p.stem


# -- one name per thing --------------------------------------------------------------------------


def test_no_two_modules_share_a_basename() -> None:
    datasets = {p.stem for p in (PACKAGE / "datasets").glob("*.py")}
    by_name: dict[str, list[str]] = defaultdict(list)
    for p in _modules():
        if p.stem != "__init__":
            by_name[p.stem].append(_rel(p))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    # a dataset's own modules are named after it (its loader in datasets/, its scorer in scoring/)
    shared = {n: ps for n, ps in shared.items()
              if not (n in datasets and all(_stage(REPO / q) in ("datasets", "scoring") for q in ps))}
    assert shared == {}


def test_public_functions_and_classes_have_one_name_each() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for p, tree in _trees():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                by_name[node.name].append(_rel(p))
    assert {n: ps for n, ps in by_name.items() if len(ps) > 1} == {}


# -- units of a readable size --------------------------------------------------------------------


def test_no_function_over_100_lines() -> None:
    long = [f"{_rel(p)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p, tree in _trees() for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno is not None
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


def test_no_module_over_600_lines() -> None:
    long = [f"{_rel(p)} ({n} lines)" for p in _modules()
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES]
    assert long == []


# -- typed contracts -----------------------------------------------------------------------------


def test_analysis_sets_no_attribute_by_name() -> None:
    found = [f"{_rel(p)}:{n.lineno}" for p, tree in _trees() if _stage(p) == "analysis"
             for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr"]
    assert found == []


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _untyped(annotation: Any) -> bool:
    """``Any``, or ``dict[str, Any]`` anywhere inside the annotation."""
    if annotation is Any:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is dict and len(args) == 2 and args[1] is Any:
        return True
    return any(_untyped(a) for a in args)


def _stored_roots() -> list[type[BaseModel]]:
    """What a run directory, an A/B file, a schedule file and a noise calibration hold: every model defined in
    results/ and config/ (the suite and its plan are stored in the manifest), and the A/B result."""
    roots: list[type[BaseModel]] = []
    for p in _modules():
        if _stage(p) not in ("results", "config") or p.stem == "__init__":
            continue
        mod = importlib.import_module("specbench." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts))
        roots += [c for c in vars(mod).values()
                  if inspect.isclass(c) and issubclass(c, BaseModel) and c.__module__ == mod.__name__]
    from specbench.analysis.ab_rounds import ABResult

    return roots + [ABResult]


def test_no_stored_model_has_an_untyped_field() -> None:
    seen: set[type[BaseModel]] = set()
    todo = _stored_roots()
    assert len(todo) > 30, "the stored models were not found"
    untyped = []
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            if _untyped(field.annotation):
                untyped.append(f"{model.__module__}.{model.__name__}.{name}: {field.annotation}")
            todo += list(_models_in(field.annotation))
    assert untyped == []


# -- one package opens a run directory's files ---------------------------------------------------

#: What reads, writes, lists or creates a file (Path methods, open, json/gzip).
_IO = {"read_text", "write_text", "read_bytes", "write_bytes", "open", "unlink", "touch", "mkdir", "stat",
       "exists", "is_file", "glob", "iterdir", "rename", "replace", "load", "dump"}


def _run_dir_file_names() -> dict[str, str]:
    """``{constant: file name}`` of the run directory's files, as specbench/results/rundir.py names them."""
    from specbench.results import rundir

    names = {k: v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str) and "." in v}
    assert {"records.jsonl", "cells.jsonl", "manifest.json", "summary.json"} <= set(names.values())
    return names


#: Files of other directories that share a run directory's file names (the zoo's cache has its own manifest).
_NOT_A_RUN_DIRECTORY = {"zoo"}


def test_only_results_opens_a_run_directory_s_files() -> None:
    names = _run_dir_file_names()
    found = []
    for p, tree in _trees():
        if _stage(p) == "results":
            continue
        for n in ast.walk(tree):
            src = ast.unparse(n) if isinstance(n, (ast.BinOp, ast.Call)) else ""
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
                parts = list(ast.walk(n))
                if ("rundir." in src or any(isinstance(x, ast.Name) and x.id in names for x in parts)
                        or (_stage(p) not in _NOT_A_RUN_DIRECTORY
                            and any(isinstance(x, ast.Constant) and x.value in names.values() for x in parts))):
                    found.append(f"{_rel(p)}:{n.lineno} builds a run-directory path: {src}")
            elif isinstance(n, ast.Call):
                f = n.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in _IO and re.search(r"\brun_dir\b|\brundir\.[A-Z_]+\b", src):
                    found.append(f"{_rel(p)}:{n.lineno} opens through a run directory: {src}")
    assert found == []


# -- renderers compute no metric -----------------------------------------------------------------

#: Modules whose functions compute numbers: report/ may take their types and constants only.
_COMPUTING = ("specbench.stats", "specbench.results.counters", "specbench.results.speed_estimators",
              "specbench.analysis")
#: Presentation helpers that live beside what they present (they select, order or format; no arithmetic on a metric).
_PRESENTATION = {"fmt_duration", "fmt_share", "harness_parts"}
_NUMERIC_LIBRARIES = {"numpy", "scipy", "statistics", "pandas"}

#: Each division report/ holds, and why it is no metric (the file, then the expression as ast.unparse writes it).
_LAYOUT_DIVISIONS = {
    ("ab_summary.py", "0.3 * len(result.verdicts()) / len(metrics)"): "the figure's height per row",
    ("ab_summary.py", "1 / (1 + result.rule.margin)"): "where the figure draws the rule's margin",
    ("compact.py", "len(longest.rows) // 2"): "half a table's rows kept in the compact summary",
    ("early_stopping_section.py", "used / available"): "prompts used of those available, as a share in a sentence",
    ("figure.py", "n_panels / cols"): "rows of a grid of panels",
    ("plots.py", "0.8 / len(methods)"): "bar width",
    ("plots_methods.py", "0.8 / max(1, len(methods))"): "bar width",
    ("plots_methods.py", "(len(methods) - 1) / 2"): "bar offset",
    ("terminal.py", "s / bd.wall_s"): "a phase's share of the run's wall, as printed",
}


def _report_modules() -> Iterator[tuple[Path, ast.Module]]:
    return ((p, t) for p, t in _trees() if _stage(p) == "report")


def test_renderers_import_no_numeric_library_and_only_types_from_what_computes() -> None:
    bad = []
    for p, tree in _report_modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                bad += [f"{_rel(p)}:{n.lineno} import {a.name}" for a in n.names
                        if a.name.split(".")[0] in _NUMERIC_LIBRARIES]
            elif isinstance(n, ast.ImportFrom) and n.module:
                if n.module.split(".")[0] in _NUMERIC_LIBRARIES:
                    bad.append(f"{_rel(p)}:{n.lineno} from {n.module}")
                elif n.module.startswith(_COMPUTING) or n.module == "specbench" and any(
                        a.name == "stats" for a in n.names):
                    mod = importlib.import_module(n.module)
                    for a in n.names:
                        obj = getattr(mod, a.name, None)
                        if callable(obj) and not inspect.isclass(obj) and a.name not in _PRESENTATION:
                            bad.append(f"{_rel(p)}:{n.lineno} takes {n.module}.{a.name}, a computation")
    assert bad == []


def test_renderers_divide_only_for_layout() -> None:
    found = []
    for p, tree in _report_modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)):
                left, right = n.left, n.right
                if isinstance(right, ast.JoinedStr) or (isinstance(right, ast.Constant) and isinstance(right.value, str)):
                    continue  # a path joined
                if isinstance(left, ast.Name) and left.id.endswith("dir"):
                    continue  # a path joined
                key = (p.name, ast.unparse(n))
                if key not in _LAYOUT_DIVISIONS:
                    found.append(f"{_rel(p)}:{n.lineno} {key[1]}")
    assert found == [], "a renderer divides: compute the number in analysis/ and store it, or list it here"


# -- every code path the docs cite exists --------------------------------------------------------

_STAGES = "|".join(sorted({_stage(p) for p in _modules()} - {"__init__"}))
_PATH = re.compile(r"(?<![\w/.-])((?:specbench|tests|benchmarks|suites|scripts|examples)/[\w./-]*\w|"
                   rf"(?:{_STAGES})/[\w/]+\.py)(?![\w<{{*./-])")
_DOTTED = re.compile(rf"(?<![\w.])(specbench\.(?:{_STAGES})(?:\.\w+)*)")


def _doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        try:
            for a in parts[k:]:
                obj = getattr(obj, a)
        except AttributeError:
            return False
        return True
    return False


def test_every_code_path_the_docs_cite_exists() -> None:
    cited, missing = 0, []
    for doc in _doc_files():
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in _PATH.finditer(line):
                cited += 1
                if not ((REPO / m.group(1)).exists() or (PACKAGE / m.group(1)).exists()):
                    missing.append(f"{doc.relative_to(REPO)}:{i} {m.group(1)}")
            for m in _DOTTED.finditer(line):
                cited += 1
                if not _resolves(m.group(1).rstrip(".")):
                    missing.append(f"{doc.relative_to(REPO)}:{i} {m.group(1)}")
    assert cited > 100, "the docs' citations were not found"
    assert missing == []


@pytest.mark.parametrize("planted, rule", [
    ("def f():\n" + "    x = 1\n" * 101, test_no_function_over_100_lines),
])
def test_a_planted_long_function_fails_its_rule(planted: str, rule: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The size rule reads the source it is given (a planted 102-line function fails it)."""
    (tmp_path / "planted.py").write_text(planted)
    monkeypatch.setitem(globals(), "_modules", lambda: [tmp_path / "planted.py"])
    monkeypatch.setitem(globals(), "_rel", lambda p: p.name)
    with pytest.raises(AssertionError):
        rule()
