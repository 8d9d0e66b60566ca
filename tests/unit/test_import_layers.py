"""Imports inside specbench point down the stages' rank table (issue 21).

Ranks, low to high (``RANKS``): settings, stats, errors < config < results < datasets,
scoring, zoo < analysis < engines, regression < execution < report < api,
frames, cli. A package imports only packages of a lower rank. The test parses
every module under ``specbench/`` with :mod:`ast` (nothing is imported) and
builds the graph of its ``specbench.*`` imports:

* every import statement counts, function-local ones included: a cycle hidden
  in a function body still ties the two modules together (and is the pattern
  this test exists to stop); imports under ``if TYPE_CHECKING:`` are left out,
  since they never run;
* ``importlib.import_module("specbench.x")`` with a literal name counts too;
* importing a package ``specbench.x`` counts as importing
  ``specbench/x/__init__.py``; ``from specbench.x import y`` counts as
  importing the submodule ``specbench.x.y`` when there is one, else the package;
  ``import specbench.x.y`` counts as importing ``specbench.x.y`` only.

It fails on (a) any import cycle, printing one cycle per strongly connected
component, and (b) any import that climbs the rank table, printing it; a
planted import shows (b) failing as it should.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from support.paths import PACKAGE

#: Each stage's rank, low to high: a package imports only packages of a lower rank (within
#: a package anything goes, cycles aside). Top-level modules count as packages of their own.
#: The facade (api, frames, cli and the package itself) may import one another.
RANKS: dict[str, int] = {
    "settings": 0, "stats": 0, "_lazy": 0, "errors": 0,
    "config": 1,
    "results": 2,
    "datasets": 3, "scoring": 3, "zoo": 3,
    "analysis": 4,
    "engines": 5, "regression": 5,
    "execution": 6,
    "report": 7,
    "api": 8, "frames": 8, "cli": 8, "": 8,
}
FACADE_RANK = 8

Graph = Mapping[str, Iterable[str]]


# --------------------------------------------------------------------------
# the graph


def module_names(root: Path, package: str) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package under ``root`` (a package is its ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every Import / ImportFrom / import_module call in the tree, at any depth, outside ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module a dotted name refers to: itself, or its closest enclosing module of the package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, modules: Mapping[str, Path], package: str) -> set[str]:
    """The package's modules that module ``name`` (file ``path``) imports."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                targets.append(sub if sub in modules else base)
        else:
            targets = [node.args[0].value]  # type: ignore[attr-defined]
        for t in targets:
            if t == package or t.startswith(package + "."):
                hit = _resolve(t, modules)
                if hit is not None and hit != name:
                    out.add(hit)
    return out


def import_graph(root: Path = PACKAGE, package: str = "specbench") -> dict[str, set[str]]:
    modules = module_names(root, package)
    return {name: imports_of(name, path, modules, package) for name, path in modules.items()}


# --------------------------------------------------------------------------
# cycles and paths


def components(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one node, each sorted, in sorted order.

    Tarjan's algorithm, iterative (a long import chain must not hit the recursion limit).
    """
    nodes = sorted({*graph, *(m for ts in graph.values() for m in ts)})
    succ = {n: sorted(graph.get(n, ())) for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(succ[node]):
                work.append((node, i + 1))
                nxt = succ[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle (``[a, b, …, a]``) per strongly connected component of more than one node.

    Each is a shortest cycle through the component's smallest name, so the output is stable.
    """
    cycles = []
    for comp in components(graph):
        members = set(comp)
        path = shortest_path({n: [m for m in graph.get(n, ()) if m in members] for n in comp}, comp[0], {comp[0]})
        assert path is not None  # a strongly connected component has a cycle through every node
        cycles.append(path)
    return cycles


def shortest_path(graph: Graph, start: str, goals: set[str]) -> list[str] | None:
    """A shortest path of at least one edge from ``start`` to any of ``goals`` (breadth first)."""
    prev: dict[str, str] = {}
    frontier = [start]
    seen: set[str] = set()
    while frontier:
        nxt = []
        for n in frontier:
            for m in sorted(graph.get(n, ())):
                if m in goals:
                    path = [m, n]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1]
                if m not in seen:
                    seen.add(m)
                    prev[m] = n
                    nxt.append(m)
        frontier = nxt
    return None


def stage_of(name: str, package: str = "specbench") -> str:
    """The stage (subpackage or top-level module) a module belongs to; ``""`` for the package itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == package else ""


def rank_violations(graph: Graph, ranks: Mapping[str, int] = RANKS, package: str = "specbench") -> list[str]:
    """``"a → b (stage x rank i imports stage y rank j)"`` for every import that climbs the rank table.

    A stage missing from the table is a violation of its own: every new subpackage gets a rank.
    """
    out = []
    for name in sorted(graph):
        s = stage_of(name, package)
        if s not in ranks:
            out.append(f"{name}: stage {s!r} has no rank in RANKS")
            continue
        for dep in sorted(graph[name]):
            d = stage_of(dep, package)
            if d == s or d not in ranks:
                continue
            if ranks[d] < ranks[s] or (ranks[d] == ranks[s] == FACADE_RANK):
                continue
            out.append(f"{name} → {dep} ({s or package} rank {ranks[s]} imports {d or package} rank {ranks[d]})")
    return out


# --------------------------------------------------------------------------
# the tests


def test_no_import_cycles() -> None:
    graph = import_graph()
    comps = components(graph)
    lines = [f"{' → '.join(c)}\n    (all of: {', '.join(m)})" for c, m in zip(find_cycles(graph), comps, strict=True)]
    assert not comps, "import cycles in specbench:\n" + "\n".join(lines)


def test_imports_point_down_the_rank_table() -> None:
    bad = rank_violations(import_graph())
    assert not bad, "imports that climb the rank table:\n" + "\n".join(bad)


def test_a_planted_higher_rank_import_fails(tmp_path: Path) -> None:
    """Copy the real package, plant one function-local import of a higher stage, and see it caught."""
    import shutil
    pkg = tmp_path / "specbench"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__", "data", "templates"))
    assert rank_violations(import_graph(pkg)) == []
    target = pkg / "results" / "records.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    from specbench.report import markdown\n    return markdown\n")
    bad = rank_violations(import_graph(pkg))
    assert bad == ["specbench.results.records → specbench.report.markdown (results rank 2 imports report rank 7)"]


def test_find_cycles_on_a_hand_built_graph() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    # two components, and a long way round next to a short one: the shortest cycle is shown
    graph = {"a": {"b", "x"}, "b": {"a"}, "x": {"y"}, "y": {"a"}, "p": {"q"}, "q": {"p"}, "r": {"p"}}
    assert find_cycles(graph) == [["a", "b", "a"], ["p", "q", "p"]]
    assert components(graph) == [["a", "b", "x", "y"], ["p", "q"]]
    # a long chain (no recursion limit) closing on itself
    chain = {str(i): {str(i + 1)} for i in range(5000)}
    chain["5000"] = {"0"}
    assert len(find_cycles(chain)) == 1


def test_rank_violations_on_a_hand_built_graph() -> None:
    graph = {"specbench.results.a": {"specbench.stats", "specbench.results.b"},
             "specbench.results.b": {"specbench.analysis.x"},  # climbs
             "specbench.engines.e": {"specbench.regression.r"},  # same rank, another stage
             "specbench.cli": {"specbench.api"},  # the facade may
             "specbench.newstage.m": set()}
    assert rank_violations(graph) == [
        "specbench.engines.e → specbench.regression.r (engines rank 5 imports regression rank 5)",
        "specbench.newstage.m: stage 'newstage' has no rank in RANKS",
        "specbench.results.b → specbench.analysis.x (results rank 2 imports analysis rank 4)",
    ]


def test_graph_reads_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import leaf\n")
    (pkg / "sub" / "leaf.py").write_text("X = 1\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import os\n"
        "from pkg.sub import X\n"  # a name of the package: the package's __init__
        "if TYPE_CHECKING:\n"
        "    from pkg import hidden\n"
        "def f():\n"
        "    from .b import g\n"  # function-local, relative
        "    import importlib\n"
        "    return importlib.import_module('pkg.sub.leaf')\n")
    (pkg / "b.py").write_text("import pkg.a\ndef g(): pass\n")
    (pkg / "hidden.py").write_text("")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.sub", "pkg.b", "pkg.sub.leaf"}
    assert graph["pkg.sub"] == {"pkg.sub.leaf"}
    assert graph["pkg.b"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]
