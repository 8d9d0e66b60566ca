"""The sandbox's dedicated uids (see :mod:`specbench.scoring.sandbox`): drawing an unused one per run
(as root), counting and killing the processes of a uid, and removing what a uid left in the
world-writable directories (mode ``none``, where no private tmpfs holds it).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import stat
import threading
import time

from specbench.scoring.sandbox_launcher import WORLD_WRITABLE

# Dedicated uids/gids are drawn from this range (well above any real account).
_UID_RANGE = (1_900_000_000, 2_100_000_000)


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
