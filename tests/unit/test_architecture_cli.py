"""docs/architecture.md: "``cli.py`` (calls ``api`` only)". Checked by :mod:`ast` over ``specbench/cli.py``: every
import of ``specbench.*`` in it, at the top or inside a function, is ``specbench.api`` or ``specbench.errors``,
and every ``api.<name>`` it uses is in ``api.__all__`` (no stage reached through api's own imports)."""

from __future__ import annotations

import ast

from support.paths import PACKAGE

from specbench import api

CLI = PACKAGE / "cli.py"
ALLOWED = {"specbench.api", "specbench.errors"}


def specbench_imports(source: str) -> set[str]:
    """Every ``specbench`` module the source imports (``from specbench import x`` counts as ``specbench.x``; a
    relative import as ``specbench.<module>``; ``importlib.import_module`` with a literal name too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: inside the specbench package
                module = "specbench" + ("." + module if module else "")
            if module == "specbench":
                found |= {f"specbench.{a.name}" for a in node.names}
            elif module.startswith("specbench."):
                found.add(module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name == "specbench" or a.name.startswith("specbench.")}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("specbench")):
            found.add(str(node.args[0].value))
    return found


def api_names_used(source: str) -> set[str]:
    """Every ``api.<name>`` the source reads."""
    return {node.attr for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api"}


def test_the_cli_imports_only_api_and_errors() -> None:
    found = specbench_imports(CLI.read_text())
    assert "specbench.api" in found
    assert sorted(found - ALLOWED) == []


def test_the_cli_uses_only_the_api_surface() -> None:
    used = api_names_used(CLI.read_text())
    assert used and sorted(used - set(api.__all__)) == []


def test_a_planted_import_or_a_reach_past_api_fails() -> None:
    """The checks see every form of import, function-local ones included, and a stage reached through api."""
    planted = (
        "from specbench import api, errors\n"
        "from specbench.errors import SpecbenchError\n"
        "from specbench.report.terminal import shown\n"
        "import specbench.results.fmt\n"
        "from specbench import stats\n"
        "def f():\n"
        "    from specbench.report.build import torn_lines_note\n"
        "    from .report import schedule_section\n"
        "    import importlib\n"
        "    importlib.import_module('specbench.analysis.timing')\n"
        "    return api.rundir.read_manifest, api.run\n"
    )
    assert sorted(specbench_imports(planted) - ALLOWED) == [
        "specbench.analysis.timing", "specbench.report", "specbench.report.build", "specbench.report.terminal",
        "specbench.results.fmt", "specbench.stats"]
    assert sorted(api_names_used(planted) - set(api.__all__)) == ["rundir"]
