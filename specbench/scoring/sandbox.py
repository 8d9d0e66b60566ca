"""Run untrusted Python programs (model completions) outside specbench's process.

Threat model: model-written code that misbehaves by accident or by imitation of
hostile code in its training data -- infinite loops, fork/memory bombs, huge
output, stray files, network access, ``os.kill`` of its parent, ``sys.exit(0)``.
It is *not* a defence against a determined attacker with kernel exploits.

How a program runs (``run_program``)::

    specbench ──Popen(start_new_session)──▶ [unshare --net --pid --mount …]
        └─▶ launcher (this file run as a script: ``python -I -S -B sandbox.py --launch``)
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

This module is standard-library only: it is also the launcher script.
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

Status = Literal["passed", "failed", "timeout", "error", "killed"]
IsolationMode = Literal["namespaces", "userns", "none"]

# Exit code the launcher uses when it could not set the sandbox up.
_SETUP_ERROR_RC = 121
# Dedicated uids/gids are drawn from this range (well above any real account).
_UID_RANGE = (1_900_000_000, 2_100_000_000)
# World-writable directories a sandboxed uid could otherwise leave files in.
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

# mount(2) / prctl(2) constants (Linux).
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
_PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 36, 38


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
            + ", ".join(_WORLD_WRITABLE),
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
        # Parent side only: this file is also the launcher script, which must
        # run with the standard library alone (``python -I -S``).
        from specbench.settings import settings

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
        env = {"PATH": _SAFE_PATH, "LANG": "C.UTF-8", "HOME": workdir}
        launcher = [
            sys.executable,
            "-I",
            "-S",
            "-B",
            os.path.abspath(__file__),
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


def _drain(fd: int, limit: int = 1 << 20) -> bytes:
    """What is in the pipe ``fd`` now (never blocks: writers may still hold it)."""
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
        size += len(data)
    return b"".join(chunks)


def _read_status(fd: int) -> dict:
    report: dict = {}
    for line in _drain(fd).decode("utf-8", "replace").splitlines():
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

    for d in _WORLD_WRITABLE:
        if os.path.isdir(d) and not os.path.islink(d):
            walk(d, 0)


# ---------------------------------------------------------------------------
# Launcher side (runs as ``python -I -S -B sandbox.py --launch CONFIG``)
# ---------------------------------------------------------------------------


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _mount(
    libc, src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    import ctypes

    enc = [None if x is None else x.encode() for x in (src, target, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {target}: {os.strerror(err)}")


def _mountpoints() -> list[str]:
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            mp = line.split()[4]
            # mountinfo escapes space, tab, newline and backslash as octal.
            points.append(
                mp.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
            )
    return points


def _setup_mounts(libc, cfg: dict) -> None:
    """Inside the new mount namespace: everything read-only, a tmpfs to work in."""
    expose = cfg.get("expose")
    prefix_fd = os.open(expose[0], os.O_PATH | os.O_DIRECTORY) if expose else -1
    # Read-only bind-remount of every inherited mount. Keep the flags that may
    # be locked (nosuid/nodev/noexec/atime) or the kernel refuses the remount.
    for mp in _mountpoints():
        try:
            keep = os.statvfs(mp).f_flag & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC | 1024 | 2048 | 4096)
            _mount(libc, None, mp, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | keep)
        except OSError:
            pass  # best effort: the dedicated uid is the primary barrier
    size = f"size={int(cfg['tmpfs_mb'])}m,nr_inodes=16384,mode=1777"
    _mount(libc, "tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, size)
    for d in _WORLD_WRITABLE[1:]:
        real = os.path.realpath(d)
        if real != "/tmp" and os.path.isdir(real):
            try:
                _mount(libc, "/tmp", real, None, _MS_BIND)
            except OSError:
                pass
    if expose:
        prefix, blocked = expose
        _mount(libc, "tmpfs", blocked, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
        os.makedirs(prefix, mode=0o755, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{prefix_fd}", prefix, None, _MS_BIND | _MS_REC)
        _mount(libc, None, prefix, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        os.close(prefix_fd)


# Runs the program for ``must_finish``: reads the token and closes its pipe
# before the program starts; writes it back only after the program returned.
# The token is never in this text (the command line is readable).
_DRIVER = """\
def _specbench_driver(path, token_fd, result_fd):
    import os, runpy
    read, write, close = os.read, os.write, os.close
    token = b""
    while True:
        chunk = read(token_fd, 256)
        if not chunk:
            break
        token += chunk
    close(token_fd)
    runpy.run_path(path, run_name="__main__")
    write(result_fd, token)
    close(result_fd)
_specbench_driver({path!r}, {token_fd}, {result_fd})
"""


def _report(fd: int, **item) -> None:
    try:
        os.write(fd, (json.dumps(item) + "\n").encode())
    except OSError:
        pass


def _launcher_main(argv: list[str]) -> int:
    import resource

    cfg = json.loads(argv[0])
    status_fd = int(cfg["status_fd"])
    os.set_inheritable(status_fd, False)
    mode = cfg["mode"]
    uid = cfg["uid"]
    for ignored in (
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
    ):
        signal.signal(ignored, signal.SIG_IGN)
    try:
        libc = _libc()
        prog = cfg["prog"]
        if mode != "none":
            with open(prog, encoding="utf-8") as f:
                source = f.read()
            _setup_mounts(libc, cfg)
            prog = "/tmp/prog.py"
            with open(prog, "w", encoding="utf-8") as f:
                f.write(source)
            os.chmod(prog, 0o644)
        else:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception as exc:
        _report(status_fd, setup_error=f"{type(exc).__name__}: {exc}")
        return _SETUP_ERROR_RC

    env = {"PATH": _SAFE_PATH, "LANG": "C.UTF-8", "HOME": cfg["workdir"]}
    interp = cfg["interpreter"]
    argv = [interp, "-I", "-S", "-B", prog]
    token = b""
    token_r = result_r = result_w = -1
    if cfg.get("must_finish"):
        # Nothing of the token outside this process and two pipes; keep our
        # memory out of the program's reach (/proc/<pid>/mem, ptrace).
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        token = os.urandom(16).hex().encode()
        token_r, token_w = os.pipe()
        os.write(token_w, token)
        os.close(token_w)
        result_r, result_w = os.pipe()
        driver = _DRIVER.format(path=prog, token_fd=token_r, result_fd=result_w)
        argv = [interp, "-I", "-S", "-B", "-c", driver]
    child = os.fork()
    if child == 0:  # the target
        try:
            for sig in range(1, signal.NSIG):
                try:
                    signal.signal(sig, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
            for name, (soft, hard) in cfg["rlimits"].items():
                resource.setrlimit(getattr(resource, name), (soft, hard))
            if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError("prctl(PR_SET_NO_NEW_PRIVS) failed")
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            elif mode == "userns":
                with open("/proc/sys/kernel/cap_last_cap") as f:
                    last = int(f.read())
                for cap in range(last + 1):
                    libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.chdir(cfg["workdir"])
            if token_r >= 0:
                os.close(result_r)
                os.set_inheritable(token_r, True)
                os.set_inheritable(result_w, True)
            os.execve(interp, argv, env)
        except BaseException as exc:
            _report(status_fd, setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(_SETUP_ERROR_RC)

    if token_r >= 0:
        os.close(token_r)
        os.close(result_w)

    def on_alarm(signum, frame):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
        _report(status_fd, timeout=True)
        _kill_children()
        os._exit(0)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, float(cfg["deadline_s"]))
    while True:
        # Reap everything (as PID 1 or subreaper orphans are ours) until the target exits.
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            _report(status_fd, setup_error="target vanished")
            return _SETUP_ERROR_RC
        if pid == child:
            break
    signal.setitimer(signal.ITIMER_REAL, 0)
    if os.WIFSIGNALED(status):
        _report(status_fd, signal=os.WTERMSIG(status))
    elif result_r >= 0:
        # Exactly the token, nothing before or after it: the driver's own write.
        _report(status_fd, exit=os.WEXITSTATUS(status), finished=_drain(result_r, 4096) == token)
    else:
        _report(status_fd, exit=os.WEXITSTATUS(status))
    if mode == "none":
        _kill_children()
    # As PID 1 of the namespace, exiting kills whatever is left.
    return 0


def _kill_children(deadline_s: float = 5.0) -> None:
    """Kill our remaining children until none is left (orphans re-parent to us)."""
    me = str(os.getpid())
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                    ppid = f.read().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
            if ppid == me:
                found = True
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            if not found:
                return
        time.sleep(0.01)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--launch":
    sys.exit(_launcher_main(sys.argv[2:]))
