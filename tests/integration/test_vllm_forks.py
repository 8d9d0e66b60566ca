"""Workers forked from a zygote that imported vLLM: what they must take again themselves.

One zygote (a real vLLM import, ~8 s), two workers forked from it, no engine: the
worker's ``serve`` here reports what a vLLM engine would run with.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import pytest

from specbench.engines.vllm_forks import FORK_HINT, _Zygote


def report(conn: Any, engine_kwargs: dict[str, Any], env: dict[str, str]) -> None:
    """A forked worker's ``serve``: its cores, OpenMP threads, name and lock context, then wait."""
    import torch

    conn.send({
        "cpus": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads(),
        "name": mp.current_process().name, "start_method": mp.get_start_method(),
        "env": os.environ.get("SPECBENCH_FORK_TEST"), "kwargs": engine_kwargs,
    })
    if engine_kwargs.get("wait"):
        conn.recv()


def test_a_forked_worker_takes_its_cores_threads_and_name_and_its_exit_is_known(tmp_path, monkeypatch) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores")  # pragma: no cover - CI has 2
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the test session sets 1; pools sized by cores here
    env = {"SPECBENCH_FORK_TEST": "1", "TORCHDYNAMO_DISABLE": "1"}
    zygote = _Zygote(env, report)
    try:
        assert zygote.settle(300), "the zygote could not import vLLM"
        runs = []
        for i, cpus in enumerate(([0], sorted(os.sched_getaffinity(0)))):
            parent, child = mp.get_context("spawn").Pipe()
            log = tmp_path / f"w{i}.log"
            proc = zygote.fork(child, ({"wait": i == 1}, str(log), {**os.environ, **env}, f"specbench-engine-w{i}",
                                       cpus))
            child.close()
            assert parent.poll(120), log.read_text()
            runs.append((proc, parent, parent.recv(), log))
        (one, _, got1, log1), (two, conn2, got2, _) = runs
        # Bound to one core: one OpenMP thread there (the zygote, on two cores, sized its pool for two).
        assert got1["cpus"] == [0] and got1["threads"] == 1, got1
        assert got2["threads"] == len(got2["cpus"]) >= 2, got2
        assert got1["name"] == "specbench-engine-w0" and got1["start_method"] == "fork", got1
        assert got1["env"] == "1" and got1["kwargs"] == {"wait": False}
        assert log1.read_text().startswith(FORK_HINT)
        # The first returned: exit code 0 (kept by the zygote); the second is killed: -9.
        one.join(30)
        assert not one.is_alive() and one.exitcode == 0
        assert two.is_alive()
        two.kill()
        two.join(30)
        assert not two.is_alive() and two.exitcode == -9
        conn2.close()
        assert not zygote.busy()
    finally:
        zygote.end()
    deadline = time.monotonic() + 10
    while zygote.proc.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not zygote.proc.is_alive()
