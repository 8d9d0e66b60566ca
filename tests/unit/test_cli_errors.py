"""One base for every error a user can fix (``SpecbenchError``), mapped to exit 2 in one place (issue 33)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench import api
from specbench.cli import app
from specbench.config.suite import SuiteError
from specbench.datasets import DatasetError
from specbench.errors import SpecbenchError
from specbench.execution.driver import RunRefused
from specbench.execution.run_plan import DataChanged
from specbench.regression.gate_rules import GateConfigError
from specbench.regression.history import HistoryError
from specbench.results.noise_calibration import NoiseError
from specbench.results.rundir import StoreError

USER_ERRORS = [SuiteError, StoreError, DatasetError, NoiseError, HistoryError, GateConfigError, RunRefused,
               api.InputError, DataChanged]


@pytest.mark.parametrize("cls", USER_ERRORS, ids=lambda c: c.__name__)
def test_every_user_facing_error_is_a_specbench_error(cls: type[Exception]) -> None:
    assert issubclass(cls, SpecbenchError)
    assert cls.__name__ in api.__all__ or cls in (StoreError, DatasetError, HistoryError, GateConfigError)


def test_an_error_carries_its_lines() -> None:
    many = SuiteError(["s.yaml:3: targets: bad", "s.yaml:9: datasets: bad"])
    assert many.messages == ["s.yaml:3: targets: bad", "s.yaml:9: datasets: bad"]
    assert str(many) == "s.yaml:3: targets: bad\ns.yaml:9: datasets: bad"
    one = StoreError("x: not a run")
    assert one.messages == ["x: not a run"] and isinstance(one, ValueError)  # still caught as before


@pytest.mark.parametrize("command", [
    ["analyze", "{d}"], ["report", "{d}"], ["calibrate", "{d}", "{d}"], ["compare", "{d}", "--baseline", "{d}"],
    ["gate", "{d}", "--baseline", "{d}", "--no-step-summary"], ["history", "add", "{d}", "--db", "{db}"],
    ["run", "{d}/missing.yaml", "--resume", "{d}"],
], ids=lambda c: c[0] if c[0] != "history" else "history-add")
def test_each_command_exits_2_on_a_directory_that_is_no_run(command: list[str], tmp_path: Path) -> None:
    args = [a.format(d=tmp_path, db=tmp_path / "h.sqlite") for a in command]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, (res.output, res.exception)
    assert f"error {tmp_path}: not a specbench run directory" in res.output.replace("\n", " ")


def test_a_nested_command_maps_its_error_too(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> None:
        raise HistoryError("history db: cannot open")
    monkeypatch.setattr(api, "history_runs", broken)
    res = CliRunner().invoke(app, ["history", "list"])
    assert res.exit_code == 2 and "error history db: cannot open" in res.output, res.output


def test_an_error_that_is_no_user_error_is_not_turned_into_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """A bug keeps its traceback: only SpecbenchError is bad input."""
    def bug(*_a: object, **_k: object) -> None:
        raise KeyError("plan")
    monkeypatch.setattr(api, "analyze", bug)
    res = CliRunner().invoke(app, ["analyze", str(tmp_path)])
    assert res.exit_code == 1 and isinstance(res.exception, KeyError)
