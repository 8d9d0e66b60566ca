"""The sandbox's launcher: the process between specbench and a sandboxed program (see
:mod:`specbench.scoring.sandbox` for the threat model, the isolation modes and what ``passed`` means).

It runs as a script, ``python -I -S -B sandbox_launcher.py --launch CONFIG``, inside the namespaces
``unshare`` made: it mounts (namespaces only: every inherited mount read-only, a size-limited tmpfs
to work in), forks the target (rlimits, no_new_privs, the dedicated uid or dropped capabilities,
then ``exec`` of the program or, with ``must_finish``, of the driver that runs it and hands the
token back), waits with its own backstop alarm and reports on the status pipe. It is standard-library
only (``-I -S`` leaves no way to import specbench); the parent side imports the constants both
sides share from here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

# Exit code the launcher uses when it could not set the sandbox up.
SETUP_ERROR_RC = 121
# World-writable directories a sandboxed uid could otherwise leave files in.
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

# mount(2) / prctl(2) constants (Linux).
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
_PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 36, 38


def drain(fd: int, limit: int = 1 << 20) -> bytes:
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
    for d in WORLD_WRITABLE[1:]:
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
    """Set the sandbox up, run the target, report how it ended (on the status pipe); 0, or
    ``SETUP_ERROR_RC`` when the sandbox could not be set up."""
    cfg = json.loads(argv[0])
    status_fd = int(cfg["status_fd"])
    os.set_inheritable(status_fd, False)
    mode = cfg["mode"]
    _ignore_signals()
    try:
        libc = _libc()
        prog = _place_program(libc, cfg)
    except Exception as exc:
        _report(status_fd, setup_error=f"{type(exc).__name__}: {exc}")
        return SETUP_ERROR_RC

    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": cfg["workdir"]}
    argv, token, token_r, result_r, result_w = _target_argv(libc, cfg, prog)
    child = os.fork()
    if child == 0:  # the target
        _exec_target(libc, cfg, argv, env, (token_r, result_r, result_w), status_fd)

    if token_r >= 0:
        os.close(token_r)
        os.close(result_w)
    status = _wait_for_target(child, status_fd, float(cfg["deadline_s"]))
    if status is None:
        return SETUP_ERROR_RC
    if os.WIFSIGNALED(status):
        _report(status_fd, signal=os.WTERMSIG(status))
    elif result_r >= 0:
        # Exactly the token, nothing before or after it: the driver's own write.
        _report(status_fd, exit=os.WEXITSTATUS(status), finished=drain(result_r, 4096) == token)
    else:
        _report(status_fd, exit=os.WEXITSTATUS(status))
    if mode == "none":
        _kill_children()
    # As PID 1 of the namespace, exiting kills whatever is left.
    return 0


def _ignore_signals() -> None:
    """The launcher outlives what specbench's terminal or process group is sent (the parent kills it)."""
    for ignored in (
        signal.SIGINT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
    ):
        signal.signal(ignored, signal.SIG_IGN)


def _place_program(libc, cfg: dict) -> str:
    """The program's path as the target sees it: in the namespace modes the mounts are set up and the
    program copied into the fresh tmpfs; in mode ``none`` the launcher becomes a child subreaper."""
    prog = cfg["prog"]
    if cfg["mode"] != "none":
        with open(prog, encoding="utf-8") as f:
            source = f.read()
        _setup_mounts(libc, cfg)
        prog = "/tmp/prog.py"
        with open(prog, "w", encoding="utf-8") as f:
            f.write(source)
        os.chmod(prog, 0o644)
    else:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return prog


def _target_argv(libc, cfg: dict, prog: str) -> tuple[list[str], bytes, int, int, int]:
    """The target's command line, and with ``must_finish`` the token and its pipes (the token's read
    end, the result's read and write ends; -1 without)."""
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
    return argv, token, token_r, result_r, result_w


def _exec_target(libc, cfg: dict, argv: list[str], env: dict, pipes: tuple[int, int, int], status_fd: int):
    """In the forked child: default signals, rlimits, no_new_privs, the dedicated uid (or, ``userns``, no
    capabilities), then ``exec`` of the target. Never returns: a failure is reported and the child exits
    ``SETUP_ERROR_RC``. ``pipes``: the token's read end, the result's read and write ends (-1 without)."""
    token_r, result_r, result_w = pipes
    uid = cfg["uid"]
    try:
        import resource

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
        elif cfg["mode"] == "userns":
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
        os.execve(cfg["interpreter"], argv, env)
    except BaseException as exc:
        _report(status_fd, setup_error=f"{type(exc).__name__}: {exc}")
    os._exit(SETUP_ERROR_RC)


def _wait_for_target(child: int, status_fd: int, deadline_s: float) -> int | None:
    """The target's wait status, reaping every other process on the way (as PID 1 or subreaper, orphans
    are ours); None (reported) when it vanished. Past ``deadline_s`` the backstop alarm kills it, reports
    the timeout and ends the launcher."""

    def on_alarm(signum, frame):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
        _report(status_fd, timeout=True)
        _kill_children()
        os._exit(0)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, deadline_s)
    while True:
        # Reap everything (as PID 1 or subreaper orphans are ours) until the target exits.
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            _report(status_fd, setup_error="target vanished")
            return None
        if pid == child:
            break
    signal.setitimer(signal.ITIMER_REAL, 0)
    return status


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
