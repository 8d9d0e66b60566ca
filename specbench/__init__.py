"""specbench: benchmark and evaluation harness for speculative decoding on vLLM.

``specbench.load(RUN_DIR)`` gives a run's requests, cells and groups as pandas
DataFrames (:mod:`specbench.frames`); the rest of the Python API is
:mod:`specbench.api`.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # Lazy, so that `import specbench.<module>` never pulls in pandas or the engines.
    if name == "load":
        return importlib.import_module("specbench.frames").load
    raise AttributeError(f"module 'specbench' has no attribute {name!r}")
