"""What each sandbox isolation mode needs and provides on this machine (see
:mod:`specbench.scoring.sandbox` for the threat model and the modes): the ``unshare`` command that
makes the namespaces, the interpreter a dedicated uid can reach (and the prefix the namespace
launcher bind-mounts when it cannot), and the description
:func:`~specbench.scoring.sandbox.describe_isolation` returns.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from dataclasses import dataclass, field
from typing import Literal

from specbench.scoring.sandbox_launcher import WORLD_WRITABLE

IsolationMode = Literal["namespaces", "userns", "none"]


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


def _isolation_of(mode: IsolationMode, root: bool, interpreter: str, notes: list[str]) -> Isolation:
    """What ``mode`` provides (``root``: the caller is root; ``notes`` so far, added to)."""
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

