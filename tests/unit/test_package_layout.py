"""The package's layout (issue 21): few top-level modules, every stage documented, its re-exports real."""

from __future__ import annotations

import importlib

import pytest
from support.paths import PACKAGE

STAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def test_at_most_eight_top_level_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_says_what_it_owns_and_its_re_exports_resolve(stage: str) -> None:
    mod = importlib.import_module(f"specbench.{stage}")
    assert (mod.__doc__ or "").strip(), f"specbench.{stage} has no docstring"
    for name in getattr(mod, "__all__", []):
        assert getattr(mod, name) is not None, f"specbench.{stage}.{name}"
