"""The one copy of a child-process engine's death handling (specbench.engines.piped_engine), on real processes."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import pytest

from specbench.engines.piped_engine import PipedEngine
from specbench.engines.protocol import CellFailed, EngineUnavailable


def _exits(conn: Any, code: int) -> None:
    os._exit(code)


def _answers_then_hangs(conn: Any) -> None:
    conn.send(("ready", {}))
    conn.recv()  # never comes


class _Engine(PipedEngine):
    def __init__(self, target: Any, args: tuple, log: Path):
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=target, args=(child, *args))
        self._proc.start()
        child.close()
        self.log_path = log
        self.gone = self.killed = 0

    def kill(self) -> None:
        self.killed += 1
        self._proc.kill()
        self._proc.join()

    def _gone(self) -> None:
        self.gone += 1
        self._proc.join()


def test_a_process_that_dies_fails_the_cell_or_the_start_with_its_exit_code_and_log(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("the engine's last words\n")
    e = _Engine(_exits, (3,), log)
    with pytest.raises(CellFailed) as cell:
        e._recv(30)
    assert cell.value.engine_dead and "exit code 3" in cell.value.reason and "last words" in (cell.value.log_tail or "")
    assert e.gone == 1 and not e.alive
    with pytest.raises(CellFailed, match="not running"):
        e._require_running()
    with pytest.raises(EngineUnavailable, match="exit code 4"):
        _Engine(_exits, (4,), log)._recv(30, starting=True)


def test_a_process_that_stops_answering_is_killed_and_its_cell_fails(tmp_path: Path) -> None:
    e = _Engine(_answers_then_hangs, (), tmp_path / "engine.log")
    assert e._recv(30)[0] == "ready" and e.alive
    with pytest.raises(CellFailed, match="did not finish the cell within 1 s") as cell:
        e._recv(1)
    assert cell.value.engine_dead and e.killed == 1 and not e.alive
