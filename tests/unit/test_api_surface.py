"""The public surface (issue 33): ``api.__all__`` lists the API and api.py defines nothing else in public
(that the CLI reaches the stages through api alone: tests/unit/test_architecture_cli.py)."""

from __future__ import annotations

import inspect

from specbench import api


def test_every_name_in_all_resolves() -> None:
    assert len(api.__all__) == len(set(api.__all__))
    missing = [n for n in api.__all__ if getattr(api, n, None) is None]
    assert missing == []


def test_api_defines_no_public_helper_outside_all() -> None:
    """What api.py itself defines in public is API (a helper that computes belongs in its stage)."""
    own = [n for n, v in vars(api).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
           and v.__module__ == api.__name__]
    assert own and sorted(set(own) - set(api.__all__)) == []
