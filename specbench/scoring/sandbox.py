"""Run untrusted Python programs (model completions) outside specbench's process.

Threat model: model-written code that misbehaves by accident or by imitation of
hostile code in its training data -- infinite loops, fork/memory bombs, huge
output, stray files, network access, ``os.kill`` of its parent, ``sys.exit(0)``.
It is *not* a defence against a determined attacker with kernel exploits.

How a program runs (``run_program``)::

    specbench ──Popen(start_new_session)──▶ [unshare --net --pid --mount …]
        └─▶ launcher (sandbox_launcher.py as a script: ``python -I -S -B sandbox_launcher.py --launch``)
              mounts (namespaces only), then forks:
              └─▶ target: rlimits, no_new_privs, setuid(dedicated uid), exec ``python -I -S -B prog.py``
                    (``must_finish``: ``python -I -S -B -c DRIVER``, the driver runs prog.py)

Isolation modes (``describe_isolation()`` says which one ``auto`` picked here):

``namespaces`` (root + ``unshare`` from util-linux)
    New network namespace (only a loopback interface, down: no network at all,
    not even the harness or a vLLM server on 127.0.0.1), new PID namespace (the
    launcher is PID 1; when it exits the kernel kills everything the program
    forked, daemons included), new mount namespace with every inherited mount
    remounted read-only and fresh size-limited tmpfs on /tmp (also bound on
    /var/tmp, /dev/shm, /run/lock) as the empty working directory. The program
    runs under a *dedicated, unused uid* (one per run), so RLIMIT_NPROC -- which
    root ignores, and which counts per user -- contains fork bombs, it cannot
    signal specbench (EPERM) and it owns nothing outside its tmpfs. When the
    interpreter lives under a directory that uid cannot enter (pyenv under a
    0700 /root), the launcher bind-mounts the interpreter's prefix read-only
    into the namespace.
``userns`` (not root, unprivileged user namespaces allowed)
    As above through ``unshare --user --map-root-user``, but without a uid
    change: the program keeps the caller's uid outside, with all capabilities
    dropped (bounding set emptied, no_new_privs). Read-only mounts and the PID
    namespace are what keep it from the caller's files and processes.
``none`` (fallback: no ``unshare`` or the kernel refuses namespaces)
    Plain subprocess with rlimits and its own session. As root, still a
    dedicated uid (processes killed and files it left in world-writable
    directories removed by uid after the run); the network is *not* isolated
    and the disk is not size-limited (only RLIMIT_FSIZE per file). Without root
    it shares the caller's uid: weak, and reported as such.

Common to every mode: fresh ``python -I -S -B`` (isolated mode, no site-packages,
no bytecode writes), scrubbed environment (PATH, LANG, HOME=working dir only),
stdin from /dev/null, stdout/stderr to files capped by RLIMIT_FSIZE (the tails
come back), RLIMIT_CPU/AS/NPROC/FSIZE/NOFILE/CORE=0, a wall-clock timeout
enforced by the parent (it SIGKILLs the process group and, where there is one,
every process of the dedicated uid), and the launcher's own backstop alarm.

``passed`` means exit status 0 *and*, with ``must_finish=True``, that the
program ran to its last line: a completion calling ``sys.exit(0)`` or
``os._exit(0)`` before the tests run must not count as passing. Success is
decided outside the program, by the launcher, and no marker the program could
read exists: the launcher draws a fresh token (``os.urandom``) that appears in
no file, command line or environment; it reaches a small driver (``python -c``,
no secret in its text) through a pipe the driver reads and *closes before the
program starts*; the driver runs the program (``runpy``) and, only once it has
returned, writes the token to a second pipe (write end only on the program's
side). The launcher counts the run as finished when exactly that token came
back, and is itself not dumpable (its memory is closed to the program). What
a HumanEval program's tests compare is kept from the completion by the judge
(:mod:`specbench.scoring.judge`: exact built-in result types, rebuilt from
their serialised form, the tests' own builtins and modules). What remains in
reach is the interpreter's own stack (``sys._getframe``, ``gc``): code that
introspects it could subvert the judge itself, which no marker scheme
prevents -- outside this threat model.

This module is the parent side (choosing the isolation, dedicated uids, starting the
launcher, the wall-clock timeout, killing what is left, classifying the outcome); the
launcher is :mod:`specbench.scoring.sandbox_launcher`, standard-library only since it runs
as a script under ``python -I -S``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from specbench.scoring import sandbox_launcher
from specbench.scoring.sandbox_launcher import SAFE_PATH, WORLD_WRITABLE, drain

Status = Literal["passed", "failed", "timeout", "error", "killed"]
IsolationMode = Literal["namespaces", "userns", "none"]

# Dedicated uids/gids are drawn from this range (well above any real account).
_UID_RANGE = (1_900_000_000, 2_100_000_000)


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


@dataclass(frozen=True)
class Isolation:
    """What a mode actually provides on this machine."""

    mode: IsolationMode
    network: str
    processes: str
    filesystem: str
    identity: str
    interpreter: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be set up here."""


# ---------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------


def run_program(
    source: str,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    *,
    limits: Limits | None = None,
    must_finish: bool = False,
    isolation: Literal["auto", "namespaces", "userns", "none"] = "auto",
) -> ExecResult:
    """Run ``source`` as a fresh Python program in the sandbox and wait for it.

    ``timeout_s``/``memory_mb`` are shortcuts for the matching ``Limits`` fields;
    an explicit ``limits`` wins. With ``must_finish``, exit status 0 counts
    only when the program also ran to its end (see the module docstring).
    Never raises for anything the program does.
    """
    if limits is None:
        limits = Limits(timeout_s=float(timeout_s), memory_mb=int(memory_mb))
    mode = _resolve_mode(isolation)
    return _run(source, limits, mode, must_finish)


def run_programs(
    sources: Sequence[str],
    workers: int = 4,
    **kwargs,
) -> list[ExecResult]:
    """``run_program`` over many sources, at most ``workers`` at a time; order preserved.

    ``kwargs`` (``must_finish``, limits, ``isolation``) go to ``run_program``.
    """
    from concurrent.futures import ThreadPoolExecutor

    if not sources:
        return []
    # Detect the isolation once, before the threads start.
    kwargs["isolation"] = _resolve_mode(kwargs.get("isolation", "auto"))
    with ThreadPoolExecutor(max_workers=max(1, int(workers)), thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda src: run_program(src, **kwargs), sources))


def describe_isolation(isolation: str = "auto") -> Isolation:
    """The isolation ``run_program(isolation=...)`` gets on this machine (probes once)."""
    mode = _resolve_mode(isolation)
    root = os.geteuid() == 0
    notes: list[str] = list(_detect_notes) if isolation == "auto" else []
    try:
        interp, expose = _interpreter_for(mode, 1 if root else None)
        interpreter = interp + (f" (prefix {expose[0]} bind-mounted read-only)" if expose else "")
    except SandboxUnavailable as exc:
        interpreter = f"unavailable: {exc}"
    if mode == "namespaces":
        return Isolation(
            mode=mode,
            network="new network namespace: loopback only, down (no network, host loopback unreachable)",
            processes="new PID namespace (all descendants die with it); dedicated uid with RLIMIT_NPROC",
            filesystem="private mount namespace: inherited mounts read-only, size-limited tmpfs on "
            + ", ".join(WORLD_WRITABLE),
            identity="dedicated unused uid/gid per run, no supplementary groups, no_new_privs",
            interpreter=interpreter,
            notes=tuple(notes),
        )
    if mode == "userns":
        notes.append("RLIMIT_NPROC counts the caller's uid in the user namespace")
        return Isolation(
            mode=mode,
            network="new network namespace: loopback only, down",
            processes="new PID namespace (all descendants die with it)",
            filesystem="private mount namespace: inherited mounts read-only, size-limited tmpfs on /tmp etc.",
            identity="caller's uid (user-namespace root with every capability dropped), no_new_privs",
            interpreter=interpreter,
            notes=tuple(notes),
        )
    notes.append("no network isolation: do not run untrusted code on a networked host in this mode")
    if root:
        identity = "dedicated unused uid/gid per run, no_new_privs; its processes and files swept after"
    else:
        identity = "caller's uid: the program can signal and write whatever the caller can"
        notes.append("weak: install util-linux unshare / allow user namespaces, or run as root")
    return Isolation(
        mode="none",
        network="host network (not isolated)",
        processes="own session; killed by process group"
        + (" and by uid" if root else "")
        + "; launcher is a child subreaper",
        filesystem="temporary working directory on disk; RLIMIT_FSIZE per file only (disk not size-limited)",
        identity=identity,
        interpreter=interpreter,
        notes=tuple(notes),
    )


_detect_lock = threading.Lock()
_detected: IsolationMode | None = None
_detect_notes: list[str] = []


def _resolve_mode(isolation: str) -> IsolationMode:
    global _detected
    requested = isolation
    if requested == "auto":
        from specbench.settings import settings  # imported when asked: importing the sandbox stays cheap

        requested = settings().sandbox_isolation
    if requested == "userns" and os.geteuid() == 0:
        raise ValueError("isolation 'userns' is for non-root callers (as root it would map to real root)")
    if requested in ("namespaces", "userns", "none"):
        return requested  # type: ignore[return-value]
    if requested != "auto":
        raise ValueError(f"unknown isolation {isolation!r}: auto, namespaces, userns or none")
    with _detect_lock:
        if _detected is None:
            _detected = _detect()
        return _detected


def _detect() -> IsolationMode:
    """Pick the strongest mode that actually runs a probe program correctly here."""
    candidates: list[IsolationMode] = []
    if sys.platform.startswith("linux") and shutil.which("unshare"):
        candidates.append("namespaces" if os.geteuid() == 0 else "userns")
    else:
        _detect_notes.append("namespaces unavailable: no util-linux 'unshare' on PATH")
    for mode in candidates:
        res = _run("print('sandbox-probe-ok')", Limits(timeout_s=20.0), mode, True)
        if res.passed:
            return mode
        why = (res.detail + " " + res.stderr_tail.strip()[-300:]).strip()
        _detect_notes.append(f"isolation {mode!r} failed its probe, fell back to 'none': {why}")
    return "none"


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

        status_r, status_w = os.pipe()
        cpu_s = limits.cpu_s if limits.cpu_s is not None else int(limits.timeout_s) + 2
        nproc = limits.nproc
        if uid is None and mode == "none":
            # Shared uid: RLIMIT_NPROC counts all the caller's processes.
            nproc += _count_uid_processes(os.getuid())
        config = {
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
            proc = subprocess.Popen(
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
        result = _classify(proc.returncode, report, timed_out, must_finish, limits)
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
    limits: Limits,
) -> _Verdict:
    if timed_out or report.get("timeout"):
        return _Verdict(False, "timeout", None, f"wall-clock timeout after {limits.timeout_s:g}s")
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


def _unshare_prefix(mode: IsolationMode) -> list[str]:
    if mode == "none":
        return []
    exe = shutil.which("unshare")
    if exe is None:
        raise SandboxUnavailable("util-linux 'unshare' not found")
    base = [exe]
    if mode == "userns":
        base += ["--user", "--map-root-user"]
    return base + ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--"]


def _interpreter_for(mode: IsolationMode, uid: int | None) -> tuple[str, list[str] | None]:
    """The interpreter the program runs with, and (namespaces) a prefix to expose.

    Same interpreter as specbench (``sys.executable``'s real path). Under a
    dedicated uid it must be reachable by "others"; when an ancestor directory
    is not (pyenv in a 0700 /root), the namespace launcher bind-mounts
    ``sys.base_prefix`` read-only over a tmpfs at that ancestor. Without
    namespaces, fall back to a system interpreter of the same major.minor.
    """
    interp = os.path.realpath(sys.executable)
    if uid is None:
        return interp, None
    prefix = os.path.realpath(sys.base_prefix)
    blocked = _first_closed_ancestor(prefix)
    if blocked is None and _other_can_read_tree(prefix) and _other_can(interp, os.X_OK):
        return interp, None
    if mode == "namespaces" and blocked is not None and interp.startswith(prefix + os.sep):
        if _other_can_read_tree(prefix):
            return interp, [prefix, blocked]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for cand in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        real = os.path.realpath(cand)
        if os.path.exists(real) and _other_can(real, os.X_OK) and _first_closed_ancestor(real) is None:
            return real, None
    raise SandboxUnavailable(
        f"no {version} interpreter reachable by an unprivileged uid (refusing to run untrusted code as root)"
    )


def _first_closed_ancestor(path: str) -> str | None:
    """The highest directory on ``path`` that 'others' cannot traverse, if any."""
    parts = path.strip("/").split("/")
    cur = ""
    for part in parts[:-1] if not os.path.isdir(path) else parts:
        cur += "/" + part
        try:
            if not os.stat(cur).st_mode & stat.S_IXOTH:
                return cur
        except OSError:
            return cur
    return None


def _other_can(path: str, mode: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    need = (stat.S_IXOTH if mode & os.X_OK else 0) | (stat.S_IROTH if mode & os.R_OK else 0)
    return st.st_mode & need == need


def _other_can_read_tree(prefix: str) -> bool:
    """Spot check: the prefix, its bin and its stdlib are world-readable."""
    v = f"python{sys.version_info.major}.{sys.version_info.minor}"
    checks = [
        prefix,
        os.path.join(prefix, "bin"),
        os.path.join(prefix, "lib"),
        os.path.join(prefix, "lib", v),
    ]
    return all(_other_can(p, os.R_OK | os.X_OK) for p in checks if os.path.exists(p))


_uid_lock = threading.Lock()
_uids_taken: set[int] = set()


def _fresh_uid() -> int:
    """An unused uid (no process runs under it, no concurrent run of ours holds it)."""
    in_use = _process_uids()
    with _uid_lock:
        while True:
            uid = random.randrange(*_UID_RANGE)
            if uid not in in_use and uid not in _uids_taken:
                _uids_taken.add(uid)
                return uid


def _release_uid(uid: int | None) -> None:
    with _uid_lock:
        _uids_taken.discard(uid)  # type: ignore[arg-type]


def _proc_uid(pid: str) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            uid, state = -1, "?"
            for line in f:
                if line.startswith("State:"):
                    state = line.split()[1]
                elif line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    break
        return uid, state
    except (OSError, ValueError, IndexError):
        return None


def _process_uids() -> set[int]:
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            info = _proc_uid(pid)
            if info:
                out.add(info[0])
    return out


def _count_uid_processes(uid: int) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            info = _proc_uid(pid)
            if info and info[0] == uid:
                n += 1
    return n


def _uid_pids(uid: int) -> list[int]:
    """Live (non-zombie) processes whose real uid is ``uid``."""
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            info = _proc_uid(pid)
            if info and info[0] == uid and info[1] not in ("Z", "X"):
                pids.append(int(pid))
    return pids


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_uid(uid: int, deadline_s: float = 10.0) -> int:
    """SIGKILL every process of ``uid`` until none is left; returns how many were found."""
    seen: set[int] = set()
    end = time.monotonic() + deadline_s
    while True:
        pids = _uid_pids(uid)
        if not pids:
            return len(seen)
        for pid in pids:
            seen.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() > end:
            return len(seen)
        time.sleep(0.01)


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


def _sweep_files(uid: int, skip: str) -> None:
    """Remove what ``uid`` left in world-writable directories (mode ``none`` only)."""

    def walk(d: str, depth: int) -> None:
        if depth > 8:
            return
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.path == skip:
                continue
            if st.st_uid == uid:
                if stat.S_ISDIR(st.st_mode):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    try:
                        os.unlink(e.path)
                    except OSError:
                        pass
            elif stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
                walk(e.path, depth + 1)

    for d in WORLD_WRITABLE:
        if os.path.isdir(d) and not os.path.islink(d):
            walk(d, 0)
