"""The public surface (issue 33): ``api.__all__`` lists the API and api.py defines nothing else in public;
the CLI reaches the stages through api (only presentation modules besides)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from specbench import api

CLI = Path(api.__file__).with_name("cli.py")


def test_every_name_in_all_resolves() -> None:
    assert len(api.__all__) == len(set(api.__all__))
    missing = [n for n in api.__all__ if getattr(api, n, None) is None]
    assert missing == []


def test_api_defines_no_public_helper_outside_all() -> None:
    """What api.py itself defines in public is API (a helper that computes belongs in its stage)."""
    own = [n for n, v in vars(api).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
           and v.__module__ == api.__name__]
    assert own and sorted(set(own) - set(api.__all__)) == []


def test_the_cli_imports_api_errors_and_presentation_only() -> None:
    allowed = ("specbench.api", "specbench.errors", "specbench.report.", "specbench.results.fmt")
    found = set()
    for node in ast.walk(ast.parse(CLI.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specbench"):
            found |= {f"{node.module}.{a.name}" if node.module == "specbench" else node.module for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("specbench")}
    assert "specbench.api" in found
    assert sorted(m for m in found if not m.startswith(allowed)) == []
