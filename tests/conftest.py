"""Whole-suite hygiene: no test may leave its own SIGINT handler in the pytest process.

A leaked handler absorbs Ctrl-C in every later test (the Ctrl-C tests then
fail far from the cause). Each test's handler is compared before and after;
a change is restored and reported as a warning that names the test.
"""

from __future__ import annotations

import os
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

#: The main group's tests that keep both cores busy (engines two at a time, a three-node Ray cluster),
#: after the side group has ended, before the trio.
MAIN_LAST = tuple(_INTEGRATION_DIR / name for name in ("test_benchmarks_smoke.py", "test_ray_cluster.py"))

#: With pytest-xdist (``-n 2 --dist loadgroup``, pyproject's addopts) the integration tests run in two
#: groups, each on one worker in collection order. The main group shares the session runs and kept
#: engines; the side group's modules start their own engines and CLI runs, mostly waiting on them (under
#: one core's worth of CPU), and share nothing with the main group: the other worker runs the unit tests,
#: then them (xdist hands out work in collection order, ``--no-loadscope-reorder``, and gives a worker
#: more only when it has two tests or fewer left). docs/measurements.md has the numbers.
INTEGRATION_WORKER = "integration"
SIDE_WORKER = "integration-side"
SIDE_MODULES = tuple(_INTEGRATION_DIR / name for name in (
    "test_stop_signals.py", "test_faults.py", "test_cross_check.py", "test_tie_flips_vllm.py",
    "test_schedule_on_engine.py", "test_vllm_forks.py", "test_vllm_patch_hook.py",
    # share no session run or kept engine either: moved off the main group, which ran 915 s of a 932-s
    # session while the other worker ran 335 s (2026-12-06, docs/measurements.md). Not test_sandbox.py: it
    # counts the sandbox directories under the temp dir, which the main group's HumanEval scoring also makes.
    "test_server.py", "test_zoo_quick_training.py", "test_html_browser.py"))

#: One thread per engine unless the caller says otherwise (tests about thread counts set or drop it).
#: OpenMP: two vLLM CPU engines on the two workers, each with a pool sized for every core, spin over the
#: same cores and ran ~6× slower side by side; the tiny zoo's step takes as long on one thread as on two.
#: Numba (vLLM's n-gram proposer, ``parallel=True``): vLLM runs it on one thread, but numba's OpenMP pool
#: is sized for every core; with the other core busy an n-gram engine ran 3–4× slower (128 tokens:
#: 1.2–2.1 s against 0.4–0.5 s with one numba thread; alone no difference).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the group marks (it suffixes node ids with them)
def pytest_collection_modifyitems(config, items):
    """Everything under tests/integration/ is an integration test (real vLLM, subprocesses): marked
    by directory, so the unit lane is ``pytest -m "not integration"`` (or ``nox -s unit``)."""
    for item in items:
        if _INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)
            side = Path(str(item.path)) in SIDE_MODULES
            item.add_marker(pytest.mark.xdist_group(SIDE_WORKER if side else INTEGRATION_WORKER))
    # The side group last, after the unit tests (xdist hands work out in this order); before it, MAIN_LAST
    # and the trio at the end of the main group. Stable: the others keep their order.
    order = {name: i for i, name in enumerate(MAIN_LAST + SHARING_TRAINED_ENGINES)}
    items.sort(key=lambda it: (Path(str(it.path)) in SIDE_MODULES, order.get(Path(str(it.path)), -1)))
