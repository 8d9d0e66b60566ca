"""Engine processes die with their parent; what a stopped run left is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from specbench.engines import procs


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_child_dies_with_its_parent(tmp_path):
    """A parent starts a child with pdeathsig_preexec and is SIGKILLed: the child goes too."""
    parent = textwrap.dedent(
        """
        import subprocess, sys, time
        from specbench.engines.procs import pdeathsig_preexec
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 preexec_fn=pdeathsig_preexec(), start_new_session=True)
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    os.kill(child, 0)  # alive
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not _gone(child):
        time.sleep(0.05)
    if not _gone(child):
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the child outlived its parent")


def _gone(pid: int) -> bool:
    """Exited (a zombie not yet reaped by whoever inherited it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_live_end_all_kills_what_is_listed():
    ended = []
    token = procs.LIVE.add("a", lambda: ended.append("a"))
    procs.LIVE.add("b", lambda: ended.append("b"))
    procs.LIVE.discard(token)
    assert procs.end_all() == ["b"] and ended == ["b"] and procs.LIVE.names() == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_worker_group_dies_with_its_parent():
    """A worker leading its own group (as vLLM offline workers do) started a process of its own
    (as vLLM's EngineCore): when the worker's parent is SIGKILLed, both go."""
    parent = textwrap.dedent(
        """
        import os, subprocess, sys, time
        pid = os.fork()
        if pid == 0:  # the worker
            from specbench.engines.procs import group_dies_with_parent
            group_dies_with_parent(os.getppid())
            core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            print(os.getpid(), core.pid, flush=True)
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    worker, core = map(int, p.stdout.readline().split())
    assert os.getpgid(core) == worker
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (_gone(worker) and _gone(core)):
        time.sleep(0.05)
    left = [x for x in (worker, core) if not _gone(x)]
    for x in left:
        os.kill(x, signal.SIGKILL)
    assert left == [], "outlived the parent"
