"""What a sandboxed run gives back (see :mod:`specbench.scoring.sandbox` for what ``passed`` means):
the launcher's report read from the status pipe, the tails of the program's output, and the
classification of all that into an :class:`ExecResult`'s status.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from typing import Literal

from specbench.scoring.sandbox_launcher import drain

Status = Literal["passed", "failed", "timeout", "error", "killed"]


@dataclass
class ExecResult:
    """Outcome of one sandboxed program."""

    passed: bool
    status: Status
    returncode: int | None
    stdout_tail: str
    stderr_tail: str
    wall_s: float
    isolation: str = ""
    detail: str = ""
    # The dedicated uid the program ran as (None when it shared the caller's uid).
    sandbox_uid: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Verdict:
    passed: bool
    status: Status
    returncode: int | None
    detail: str


def _classify(
    launcher_rc: int | None,
    report: dict,
    timed_out: bool,
    must_finish: bool,
    timeout_s: float,
) -> _Verdict:
    if timed_out or report.get("timeout"):
        return _Verdict(False, "timeout", None, f"wall-clock timeout after {timeout_s:g}s")
    if "setup_error" in report:
        return _Verdict(False, "error", None, "sandbox setup failed: " + str(report["setup_error"]))
    if "exit" in report:
        rc = int(report["exit"])
        if rc != 0:
            return _Verdict(False, "failed", rc, f"exit status {rc}")
        if must_finish and report.get("finished") is not True:
            return _Verdict(False, "failed", 0, "exit status 0 but the program did not run to its end")
        return _Verdict(True, "passed", 0, "")
    if "signal" in report:
        sig = int(report["signal"])
        name = _signame(sig)
        if sig == signal.SIGXCPU:
            return _Verdict(False, "timeout", -sig, f"CPU limit exceeded ({name})")
        return _Verdict(False, "killed", -sig, f"killed by {name}")
    # The launcher itself died before reporting.
    if launcher_rc is not None and launcher_rc < 0:
        return _Verdict(False, "killed", launcher_rc, f"sandbox launcher killed by {_signame(-launcher_rc)}")
    return _Verdict(False, "error", launcher_rc, f"sandbox launcher exited {launcher_rc} without a report")


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _read_status(fd: int) -> dict:
    report: dict = {}
    for line in drain(fd).decode("utf-8", "replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            report.update(item)
    return report


def _tail(path: str, nbytes: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - nbytes))
            data = f.read(nbytes)
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return ("…" + text) if size > nbytes else text
