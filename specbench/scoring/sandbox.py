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

The parent side is this module (choosing the isolation: ``run_program``, ``run_programs``,
``describe_isolation``) and the modules it runs on: :mod:`~specbench.scoring.sandbox_isolation` (what
each mode needs and provides here: ``unshare``, an interpreter the dedicated uid can reach),
:mod:`~specbench.scoring.sandbox_process` (the limits, starting the launcher, the wall-clock timeout,
killing what is left), :mod:`~specbench.scoring.sandbox_uids` (dedicated uids: drawing, killing,
sweeping their files) and :mod:`~specbench.scoring.sandbox_outcome` (the launcher's report, the output
tails, classifying the outcome). The launcher is :mod:`specbench.scoring.sandbox_launcher`,
standard-library only since it runs as a script under ``python -I -S``.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Sequence
from typing import Literal

from specbench.scoring.sandbox_isolation import (
    Isolation,
    IsolationMode,
    SandboxUnavailable,
    _interpreter_for,
    _isolation_of,
)
from specbench.scoring.sandbox_outcome import ExecResult, Status
from specbench.scoring.sandbox_process import Limits, _run

__all__ = [
    "ExecResult",
    "Isolation",
    "IsolationMode",
    "Limits",
    "SandboxUnavailable",
    "Status",
    "describe_isolation",
    "run_program",
    "run_programs",
]


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
    return _isolation_of(mode, root, interpreter, notes)


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

