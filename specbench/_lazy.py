"""Lazy re-exports for the stage packages' ``__init__`` (PEP 562).

Each subpackage names its public API once, ``{name: submodule}``; the submodule
is imported on first use, so ``import specbench.engines.vllm_patches`` (run in
every engine process) never pulls in vLLM, and importing a stage stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` re-exporting ``names`` (public name → submodule)."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
