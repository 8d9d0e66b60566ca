"""Running one program in the sandbox, the parent side (see :mod:`specbench.scoring.sandbox` for the
threat model and the process tree): the resource limits, the run directory and the program file in
it, the launcher's configuration and command line, the wall-clock timeout, and killing what is left
before the outcome is collected (:mod:`specbench.scoring.sandbox_outcome`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from specbench.scoring import sandbox_launcher
from specbench.scoring.sandbox_isolation import (
    IsolationMode,
    SandboxUnavailable,
    _first_closed_ancestor,
    _interpreter_for,
    _unshare_prefix,
)
from specbench.scoring.sandbox_launcher import SAFE_PATH
from specbench.scoring.sandbox_outcome import ExecResult, _classify, _read_status, _tail
from specbench.scoring.sandbox_uids import (
    _count_uid_processes,
    _fresh_uid,
    _kill_uid,
    _release_uid,
    _sweep_files,
)


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to the program (each process it starts gets them too)."""

    timeout_s: float = 10.0
    memory_mb: int = 512  # RLIMIT_AS per process
    cpu_s: int | None = None  # RLIMIT_CPU; default ceil(timeout_s) + 1
    nproc: int = 16  # RLIMIT_NPROC for the dedicated uid
    fsize_mb: int = 32  # RLIMIT_FSIZE: any file written, stdout/stderr included
    nofile: int = 64  # RLIMIT_NOFILE
    tmpfs_mb: int = 64  # size of the working tmpfs (namespaces / userns)
    output_tail_bytes: int = 8192  # how much of stdout/stderr comes back


def _run(source: str, limits: Limits, mode: IsolationMode, must_finish: bool) -> ExecResult:
    start = time.monotonic()
    uid = _fresh_uid() if os.geteuid() == 0 else None
    try:
        return _run_as(source, limits, mode, must_finish, uid, start)
    finally:
        _release_uid(uid)


def _run_as(
    source: str, limits: Limits, mode: IsolationMode, must_finish: bool, uid: int | None, start: float
) -> ExecResult:
    try:
        interp, expose = _interpreter_for(mode, uid)
    except SandboxUnavailable as exc:
        return ExecResult(False, "error", None, "", "", 0.0, mode, str(exc), uid)
    rundir = tempfile.mkdtemp(prefix="specbench-sbx-")
    status_r = status_w = -1
    proc: subprocess.Popen | None = None
    timed_out = False
    try:
        workdir, prog_path = _write_program(source, rundir, mode, uid)
        status_r, status_w = os.pipe()
        config = _launcher_config(
            limits, mode, uid, interp, expose, prog_path, workdir, must_finish, status_w
        )
        proc = _start_launcher(mode, config, rundir, workdir, status_w)
        os.close(status_w)
        status_w = -1
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        wall = time.monotonic() - start
        _kill_group(proc.pid)
        proc.wait()
        leftovers = _kill_uid(uid) if uid is not None else 0
        report = _read_status(status_r)
        stdout_tail = _tail(os.path.join(rundir, "stdout"), limits.output_tail_bytes)
        stderr_tail = _tail(os.path.join(rundir, "stderr"), limits.output_tail_bytes)
        if mode == "none" and uid is not None:
            _sweep_files(uid, skip=rundir)
        result = _classify(proc.returncode, report, timed_out, must_finish, limits.timeout_s)
        if leftovers:
            result.detail += f"; killed {leftovers} leftover process(es) of the sandbox uid"
        return ExecResult(
            passed=result.passed,
            status=result.status,
            returncode=result.returncode,
            stdout_tail=stdout_tail,
            stderr_tail=stderr_tail,
            wall_s=round(wall, 4),
            isolation=mode,
            detail=result.detail,
            sandbox_uid=uid,
        )
    except Exception as exc:  # sandbox failure, never the program's fault
        if proc is not None and proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
        if uid is not None:
            _kill_uid(uid)
        return ExecResult(
            False, "error", None, "", "", time.monotonic() - start, mode, f"sandbox error: {exc!r}", uid
        )
    finally:
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(rundir, ignore_errors=True)


def _write_program(source: str, rundir: str, mode: IsolationMode, uid: int | None) -> tuple[str, str]:
    """Write ``source`` where the launcher reads it; returns the working directory (as the program sees
    it) and the program file. Mode ``none`` works on disk in ``rundir/work`` (owned by the sandbox uid);
    the namespace modes copy the program into their tmpfs, which is the working directory."""
    if mode == "none":
        if uid is not None and _first_closed_ancestor(os.path.dirname(rundir)) is not None:
            raise SandboxUnavailable(f"{rundir} is not reachable by the sandbox uid (check TMPDIR)")
        os.chmod(rundir, 0o711)
        workdir = os.path.join(rundir, "work")
        os.mkdir(workdir, 0o700)
        if uid is not None:
            os.chown(workdir, uid, uid)
        prog_path = os.path.join(workdir, "prog.py")
    else:
        workdir = "/tmp"  # the tmpfs, as the program sees it
        prog_path = os.path.join(rundir, "prog.py")
    with open(prog_path, "w", encoding="utf-8") as f:
        f.write(source)
    os.chmod(prog_path, 0o644)
    return workdir, prog_path


def _launcher_config(
    limits: Limits,
    mode: IsolationMode,
    uid: int | None,
    interp: str,
    expose: list[str] | None,
    prog_path: str,
    workdir: str,
    must_finish: bool,
    status_w: int,
) -> dict:
    """The launcher's ``--launch`` configuration (read by ``sandbox_launcher._launcher_main``)."""
    cpu_s = limits.cpu_s if limits.cpu_s is not None else int(limits.timeout_s) + 2
    nproc = limits.nproc
    if uid is None and mode == "none":
        # Shared uid: RLIMIT_NPROC counts all the caller's processes.
        nproc += _count_uid_processes(os.getuid())
    return {
        "mode": mode,
        "uid": uid,
        "interpreter": interp,
        "expose": expose,
        "prog": prog_path,
        "workdir": workdir,
        "must_finish": must_finish,
        "status_fd": status_w,
        "deadline_s": limits.timeout_s + 5.0,
        "tmpfs_mb": limits.tmpfs_mb,
        "rlimits": {
            "RLIMIT_CPU": [cpu_s, cpu_s + 1],
            "RLIMIT_AS": [limits.memory_mb << 20] * 2,
            "RLIMIT_NPROC": [nproc] * 2,
            "RLIMIT_FSIZE": [limits.fsize_mb << 20] * 2,
            "RLIMIT_NOFILE": [limits.nofile] * 2,
            "RLIMIT_CORE": [0, 0],
        },
    }


def _start_launcher(
    mode: IsolationMode, config: dict, rundir: str, workdir: str, status_w: int
) -> subprocess.Popen:
    """Start the launcher (behind ``unshare`` in the namespace modes) in a session of its own, its
    stdout and stderr to files in ``rundir``, the status pipe's write end its only inherited fd."""
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": workdir}
    launcher = [
        sys.executable,
        "-I",
        "-S",
        "-B",
        os.path.abspath(sandbox_launcher.__file__),
        "--launch",
        json.dumps(config),
    ]
    cmd = _unshare_prefix(mode) + launcher
    with (
        open(os.path.join(rundir, "stdout"), "wb") as out,
        open(os.path.join(rundir, "stderr"), "wb") as err,
    ):
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            cwd=rundir,
            start_new_session=True,
            pass_fds=(status_w,),
            close_fds=True,
        )


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
