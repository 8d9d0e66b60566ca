"""The sandbox against real programs: HumanEval canonical solutions and a corpus
of hostile completions (tests/integration/hostile/*.py).

Each hostile file is appended, as module-level code, to a wrong completion of
HumanEval/0 and run through the sandbox like any scored completion. Every one
must fail its task within its time limit, leave no process and no file behind,
leave specbench alive, and not prevent a correct solution from passing next.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from specbench.scoring.humaneval import build_program, load_problems, score_humaneval
from specbench.scoring.sandbox import describe_isolation, run_program, run_programs

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX only")

HOSTILE_DIR = Path(__file__).parent / "hostile"
WRONG_BODY = "    return None  # wrong on purpose: the hostile code below is module-level\n\n\n"
GRACE_S = 3.0
SANDBOX_UID_MIN = 1_000_000_000  # the sandbox draws dedicated uids from above this  # sandbox start + teardown on a busy 2-core machine

# name -> (timeout_s, statuses it may end with)
CASES: dict[str, tuple[float, set[str]]] = {
    "infinite_loop": (2.0, {"timeout"}),
    "fork_bomb": (3.0, {"timeout", "failed", "killed"}),
    "memory_bomb": (10.0, {"failed", "killed"}),
    "huge_output": (10.0, {"failed", "killed", "timeout"}),
    "files_outside": (10.0, {"failed"}),
    "chdir_root_write": (10.0, {"failed"}),
    "socket_loopback": (10.0, {"failed"}),
    "socket_external": (10.0, {"failed"}),
    "kill_parent": (10.0, {"failed", "killed"}),
    "read_secrets": (10.0, {"failed"}),
    "close_stdout": (10.0, {"failed"}),
    "exit_zero": (10.0, {"failed"}),
    "sys_exit_zero": (10.0, {"failed"}),
    "daemon_escape": (10.0, {"failed"}),
    "disk_fill": (10.0, {"failed", "killed"}),
    "fd_exhaustion": (10.0, {"failed"}),
    "privilege_escalation": (10.0, {"failed"}),
    "forge_marker": (10.0, {"failed"}),
    "always_equal": (10.0, {"failed"}),
}
NETWORK_CASES = {"socket_loopback", "socket_external"}


def test_corpus_matches_cases():
    assert {p.stem for p in HOSTILE_DIR.glob("*.py")} == set(CASES)


@pytest.fixture(scope="module")
def problems():
    return load_problems()


def _canonical_passes(problems, task_id: str = "HumanEval/0", isolation: str = "auto") -> bool:
    p = problems[task_id]
    src = build_program(p, p["canonical_solution"]) + "\n"
    res = run_program(src, timeout_s=10, must_finish=True, isolation=isolation)
    return res.passed


def _foreign_processes(baseline: set[tuple[int, float]]) -> list[psutil.Process]:
    """Live processes new since ``baseline`` that look like sandbox leftovers.

    That is: running under a uid from the sandbox's dedicated range, living in
    another PID namespace than ours, or descending from this test process.
    (Other new processes -- apt's mandb, a colleague's pip -- are not ours.)
    """
    me = psutil.Process()
    my_ns = os.readlink("/proc/self/ns/pid")
    out = []
    for proc in psutil.process_iter(["pid", "uids", "create_time", "status"]):
        try:
            key = (proc.pid, proc.info["create_time"])
            if key in baseline or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            other_ns = os.readlink(f"/proc/{proc.pid}/ns/pid") != my_ns
            if proc.info["uids"].real >= SANDBOX_UID_MIN or other_ns:
                out.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError, PermissionError):
            continue
    for child in me.children(recursive=True):
        try:
            # Children that predate the run (e.g. multiprocessing's resource tracker left by
            # earlier vLLM tests in this session) are not the sandbox's.
            if (child.pid, child.create_time()) not in baseline and child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


def _live_strays(baseline: set[tuple[int, float]], settle_s: float = 3.0) -> list[tuple[int, list[str]]]:
    """Sandbox leftovers still running ``settle_s`` after the run returned, as (pid, cmdline).

    A process that is exiting when first listed (killed, not yet reaped: a zombie by the
    time its command line is read) is not a leftover; one still running after the grace is.
    """
    deadline = time.monotonic() + settle_s
    while True:
        described = []
        for proc in _foreign_processes(baseline):
            try:
                described.append((proc.pid, proc.cmdline()))
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        if not described or time.monotonic() >= deadline:
            return described
        time.sleep(0.2)


def _snapshot() -> set[tuple[int, float]]:
    out = set()
    for proc in psutil.process_iter(["pid", "create_time"]):
        out.add((proc.pid, proc.info["create_time"]))
    return out


def _uid_alive(uid: int | None) -> list[int]:
    if uid is None:
        return []
    alive = []
    for proc in psutil.process_iter(["pid", "uids", "status"]):
        try:
            if proc.info["uids"].real == uid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return alive


def _sbx_dirs() -> set[str]:
    return {n for n in os.listdir("/tmp") if n.startswith("specbench-sbx-")}


MODES = ["auto"]
if hasattr(os, "geteuid") and os.geteuid() == 0:
    MODES.append("none")  # the fallback, still under a dedicated uid


# Without a network namespace ("none") a network case would really send traffic from the
# test machine, so those pairs are not generated at all (never skipped at run time).
HOSTILE_PAIRS = [
    (name, isolation)
    for name in sorted(CASES)
    for isolation in MODES
    if not (name in NETWORK_CASES and isolation == "none")
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("name", "isolation"), HOSTILE_PAIRS)
def test_hostile_completion_is_contained(name, isolation, problems, monkeypatch):
    if name in NETWORK_CASES and describe_isolation(isolation).mode == "none":
        pytest.fail("auto isolation fell back to 'none' (no namespaces): network cases cannot be contained")
    timeout_s, statuses = CASES[name]
    tag = uuid.uuid4().hex
    secret = f"specbench-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("SPECBENCH_TEST_SECRET", secret)

    # A sentinel directory the hostile code tries to delete (owned by us, 0755
    # under a 0755 parent in /tmp, as most of the filesystem is) and the paths
    # it must not create.
    tmp_path = Path(tempfile.mkdtemp(prefix="specbench-sentinel-"))
    os.chmod(tmp_path, 0o755)
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir(mode=0o755)
    (sentinel / "keep.txt").write_text("keep")
    pwned = [
        Path(f"/tmp/specbench_pwned_{tag}"),
        Path(f"/var/tmp/specbench_pwned_{tag}"),
        Path(f"/dev/shm/specbench_pwned_{tag}"),
        Path(f"/run/lock/specbench_pwned_{tag}"),
        Path(f"/specbench_pwned_{tag}"),
        Path(f"/etc/specbench_pwned_{tag}"),
        Path(f"/etc/specbench_pwned_su_{tag}"),
        Path(f"/tmp/specbench_pwned_late_{tag}"),
        Path(f"/var/tmp/specbench_pwned_late_{tag}"),
        sentinel / f"specbench_pwned_{tag}",
        tmp_path / f"specbench_pwned_{tag}_sibling",
    ]

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    port = listener.getsockname()[1]

    hostile = (HOSTILE_DIR / f"{name}.py").read_text()
    hostile = (
        hostile.replace("SPECBENCH_TAG", tag)
        .replace("SPECBENCH_SENTINEL_DIR", str(sentinel))
        .replace("SPECBENCH_LOOPBACK_PORT", str(port))
    )
    source = build_program(problems["HumanEval/0"], WRONG_BODY + hostile) + "\n"

    before = _snapshot()
    dirs_before = _sbx_dirs()
    t0 = time.monotonic()
    try:
        res = run_program(source, timeout_s=timeout_s, must_finish=True, isolation=isolation)
        took = time.monotonic() - t0
        if name == "daemon_escape":
            time.sleep(1.5)  # the daemon would write its file after 1 s

        assert not res.passed, res
        assert res.status in statuses, res
        assert res.wall_s <= timeout_s + GRACE_S, res
        assert took <= timeout_s + 2 * GRACE_S, (took, res)

        leftovers = [p for p in pwned if os.path.lexists(p)]
        assert not leftovers, leftovers
        assert (sentinel / "keep.txt").read_text() == "keep"
        assert _uid_alive(res.sandbox_uid) == [], res.sandbox_uid
        stray = _live_strays(before)
        assert not stray, stray
        assert _sbx_dirs() - dirs_before == set()

        output = res.stdout_tail + res.stderr_tail
        assert secret not in output
        assert "CONNECTED" not in output
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            conn = None
        assert conn is None, "the sandbox reached the host's loopback"
        if name == "huge_output":
            assert len(res.stdout_tail.encode()) <= 8192 + 8
        if name == "forge_marker":  # it did hunt and claim, and still did not pass
            assert "FORGED" in res.stdout_tail and res.returncode == 0, res
            assert "did not run to its end" in res.detail, res
        if name == "always_equal":  # it ran to its end; the judge refused the result
            assert "not a plain built-in value" in res.stderr_tail, res
        if name == "privilege_escalation" and res.sandbox_uid is not None:
            assert "uid=0" not in output

        assert _canonical_passes(problems, isolation=isolation)
    finally:
        listener.close()
        for p in pwned:  # never leave a mess, even when the test fails
            if p.is_file():
                p.unlink()
        shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.timeout(600)
def test_humaneval_canonical_solutions_all_pass(problems):
    """164/164 through run_programs with 4 workers, nothing left behind."""
    before = _snapshot()
    dirs_before = _sbx_dirs()
    sources = [build_program(p, p["canonical_solution"]) + "\n" for p in problems.values()]
    t0 = time.monotonic()
    results = run_programs(sources, workers=4, must_finish=True, timeout_s=20)
    took = time.monotonic() - t0
    assert len(results) == len(problems) == 164
    failed = [
        (tid, r.status, r.detail, r.stderr_tail[-300:])
        for tid, r in zip(problems, results, strict=True)
        if not r.passed
    ]
    assert not failed, failed
    assert all(_uid_alive(r.sandbox_uid) == [] for r in results)
    assert not _foreign_processes(before)
    assert _sbx_dirs() - dirs_before == set()
    print(f"164 canonical solutions in {took:.1f}s, isolation={results[0].isolation}")


@pytest.mark.timeout(300)
def test_score_humaneval_end_to_end(problems):
    """Truncation + marker + sandbox: canonical passes, wrong and sys.exit(0) fail, order kept."""
    p0 = problems["HumanEval/0"]
    items = [
        ("HumanEval/0", p0["canonical_solution"] + "\n\ndef unrelated():\n    pass\n"),
        ("HumanEval/0", "    return None\n"),
        ("HumanEval/0", "    import sys\n    sys.exit(0)\n"),
        ("HumanEval/2", problems["HumanEval/2"]["canonical_solution"]),
    ]
    res = score_humaneval(items, allow_code_exec=True, problems=problems, workers=2)
    assert [r.passed for r in res] == [True, False, False, True]
    assert [r.task_id for r in res] == [t for t, _ in items]


def test_order_preserved_and_statuses():
    srcs = ["print('a')", "raise SystemExit(3)", "import time; time.sleep(30)", "print('d')"]
    res = run_programs(srcs, workers=4, timeout_s=2)
    assert [r.status for r in res] == ["passed", "failed", "timeout", "passed"]
    assert res[0].stdout_tail == "a\n" and res[3].stdout_tail == "d\n"
    assert res[1].returncode == 3


def test_must_finish_counts_only_programs_that_ran_to_their_end():
    srcs = [
        "assert __name__ == '__main__'\nprint('end')\n",
        "import sys\nsys.exit(0)\nprint('never')\n",
        "import os\nos._exit(0)\n",
        "import os, atexit\natexit.register(os._exit, 0)\nraise SystemExit(0)\n",
    ]
    res = run_programs(srcs, workers=4, must_finish=True, timeout_s=10)
    assert [r.passed for r in res] == [True, False, False, False], res
    assert res[0].stdout_tail == "end\n"
    assert all(r.returncode == 0 for r in res[1:]), res
    # Without must_finish exit status 0 is enough.
    assert run_program(srcs[1], timeout_s=10).passed


def test_environment_is_scrubbed_and_workdir_empty(monkeypatch):
    monkeypatch.setenv("SPECBENCH_TEST_SECRET", "hunter2")
    src = "import os, json; print(json.dumps({'env': dict(os.environ), 'cwd': sorted(os.listdir('.'))}))"
    res = run_program(src, timeout_s=10)
    assert res.passed, res
    import json

    info = json.loads(res.stdout_tail)
    assert set(info["env"]) <= {"PATH", "LANG", "HOME", "LC_CTYPE"}
    assert "hunter2" not in res.stdout_tail
    assert info["cwd"] == ["prog.py"]


def test_describe_isolation_reports_a_mode():
    iso = describe_isolation()
    assert iso.mode in {"namespaces", "userns", "none"}
    assert iso.network and iso.processes and iso.filesystem and iso.identity


def test_sandbox_process_cannot_reach_specbench_files(tmp_path):
    """The program cannot read a 0600 file of specbench's (when it runs under its own uid)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret")
    os.chmod(secret, stat.S_IRUSR | stat.S_IWUSR)
    os.chmod(tmp_path, 0o755)
    res = run_program(f"print(open({str(secret)!r}).read())", timeout_s=10)
    if res.sandbox_uid is None:
        pytest.skip("program shares specbench's uid in this mode")
    assert "top-secret" not in res.stdout_tail
    assert res.status == "failed"
