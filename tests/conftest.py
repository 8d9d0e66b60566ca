"""Whole-suite hygiene: no test may leave its own SIGINT handler in the pytest process.

A leaked handler absorbs Ctrl-C in every later test (the Ctrl-C tests then
fail far from the cause). Each test's handler is compared before and after;
a change is restored and reported as a warning that names the test.
"""

from __future__ import annotations

import signal
import warnings
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _sigint_handler_is_restored(request):
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        warnings.warn(
            f"{request.node.nodeid} left SIGINT handler {after!r} (was {before!r}); restored",
            stacklevel=1,
        )


_INTEGRATION_DIR = Path(__file__).parent / "integration"

#: Integration modules whose runs share kept engines (the ``kept_engines`` fixture: the trained target's
#: baseline and EAGLE-3, identical in all three), run one after another, last: nothing in between evicts them.
SHARING_TRAINED_ENGINES = tuple(_INTEGRATION_DIR / name
                                for name in ("test_early_stopping.py", "test_speed_rounds.py", "test_workloads.py"))


#: With pytest-xdist (``-n 2 --dist loadgroup``, pyproject's addopts) every integration test runs on one
#: worker, in collection order: they share session runs and kept engines, and engine tests side by side
#: slow each other 1.3–3×. The unit tests run on the other worker meanwhile; the integration tests that
#: start no engine did not pay there (docs/measurements.md, "Test command and main job").
INTEGRATION_WORKER = "integration"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the group marks (it suffixes node ids with them)
def pytest_collection_modifyitems(config, items):
    """Everything under tests/integration/ is an integration test (real vLLM, subprocesses): marked
    by directory, so the unit lane is ``pytest -m "not integration"`` (or ``nox -s unit``)."""
    for item in items:
        if _INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.xdist_group(INTEGRATION_WORKER))
    order = {name: i for i, name in enumerate(SHARING_TRAINED_ENGINES)}
    items.sort(key=lambda it: order.get(Path(str(it.path)), -1))  # stable: the others keep their order
