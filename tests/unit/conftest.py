"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to read a dataset from the hub fails the test (HF_HUB_OFFLINE set as well)."""
    from specbench.datasets import speed_bench
    from specbench.datasets.base import KindModule

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*a, **k):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(KindModule, "hub_rows", refuse)
    monkeypatch.setattr(speed_bench, "load_hub", refuse)
