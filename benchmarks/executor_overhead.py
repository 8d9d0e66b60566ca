"""What the Ray executor costs and what a second slot buys, from one run.

Runs the same 4-engine suite (tiny zoo, vLLM CPU) three times in one process:
``local`` (one engine at a time, in this process's children), ``ray`` with one
slot (``--max-parallel-engines 1``, the same serial work) and ``ray`` with two
slots. It prints the wall time of each (the engine part of ``specbench run``:
``Runner.run``), the Ray executor's scheduling overhead per job
((ray×1 − local) / jobs: task scheduling, worker start, imports, event
streaming) and the 2-slot / 1-slot wall-time ratio.

    .venv/bin/python benchmarks/executor_overhead.py [--prompts 4] [--max-tokens 48] [--smoke]

On a 2-core machine two CPU engines compete for the cores, so the ratio shows
scheduling, not GPU scaling; on a GPU node each engine gets its own GPU.
Ray is started for the run (a local instance with 2 logical GPUs as slots)
unless ``--ray-address`` names a cluster.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

METHODS = """
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
      - name: self-draft
        method: draft_model
        speculator: target
        num_speculative_tokens: 3
      - method: eagle3
        speculator: tiny:eagle3
        num_speculative_tokens: 3"""
SMOKE_METHODS = """
      - method: baseline"""
#: ``--smoke`` runs the executors' whole path (jobs, events, engine start and close, Ray tasks) on the
#: reference simulator: an engine in a child process like vLLM's, started in a second instead of ~25 s.
SMOKE_ENGINE = """
    engine: reference"""
SUITE = """
name: executor-overhead
targets:
  - name: tiny
    model: tiny
    assets: trained
    dtype: float32
    max_model_len: 1024{engine}
    methods:{methods}
datasets:
  - name: he
    kind: humaneval
    limit: {prompts}
sampling:
  max_tokens: {max_tokens}
load:
  batch_sizes: [1]
warmup: false
"""


def timed_run(suite_path: Path, out: Path, executor: str, slots: int | None) -> tuple[float, float]:
    """(wall of Runner.run, mean seconds per job that the executor adds between jobs).

    The second number is measured on the events: from a job's last event (its engine
    closed) to the next job's first (its engine starting), in a one-slot run; it holds
    task scheduling, worker start, imports and event streaming, not engine work.
    """
    from specbench import api
    from specbench.config.plan import expand
    from specbench.execution.driver import Runner
    from specbench.execution.executors import make_executor
    from specbench.execution.jobs import EngineState, JobEnded
    from specbench.results.rundir import new_run_id

    suite = api.load_suite(suite_path)
    plan = expand(suite)
    run_dir = out / f"{executor}-{slots}-{new_run_id()}"
    run_dir.mkdir(parents=True)
    runner = Runner(plan, run_dir, new_run_id(), executor=make_executor(executor, max_parallel=slots))
    marks: list[tuple[str, float]] = []
    on_event = runner.on_event

    def timed(ev: object) -> None:
        if isinstance(ev, EngineState) and ev.state == "starting":
            marks.append(("start", time.perf_counter()))
        elif isinstance(ev, JobEnded):
            marks.append(("end", time.perf_counter()))
        on_event(ev)

    runner.on_event = timed  # type: ignore[method-assign]
    t0 = time.perf_counter()
    marks.append(("end", t0))  # the run's start counts as the end of a job 0
    runner.run()
    wall = time.perf_counter() - t0
    failed = [c for c in api.rundir.read_cells(run_dir) if c.status != "ok"]
    if failed:
        raise SystemExit(f"{executor}×{slots}: {len(failed)} cells not ok: {failed[0].reason}")
    gaps = [b[1] - a[1] for a, b in zip(marks, marks[1:], strict=False) if a[0] == "end" and b[0] == "start"]
    return wall, sum(gaps) / len(gaps) if gaps else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (local, ray ×1, ray ×2); the best of each is kept")
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: one reference-simulator engine (no speculation) per executor, 1 prompt, "
                    "8 tokens, 1 round")
    args = ap.parse_args()
    methods, jobs = (SMOKE_METHODS, 1) if args.smoke else (METHODS, 4)
    if args.smoke:
        args.prompts, args.max_tokens, args.rounds = 1, 8, 1
    import ray

    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:
        ray.init(num_gpus=2, include_dashboard=False, log_to_driver=False)
    runs = {"local ×1": ("local", None), "ray ×1": ("ray", 1), "ray ×2": ("ray", 2)}
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "suite.yaml"
        suite.write_text(SUITE.format(methods=methods, engine=SMOKE_ENGINE if args.smoke else "",
                                      prompts=args.prompts, max_tokens=args.max_tokens))
        for _ in range(args.rounds):  # interleaved: machine drift hits every arm alike
            for name, (kind, slots) in runs.items():
                results[name].append(timed_run(suite, Path(tmp), kind, slots))
    best = {k: min(v) for k, v in results.items()}
    print(f"{'executor × slots':<18}{'wall (s), each round':>28}{'best':>8}{'between jobs (s)':>18}")
    for name, rs in results.items():
        walls = ", ".join(f"{w:.1f}" for w, _ in rs)
        print(f"{name:<18}{walls:>28}{best[name][0]:>8.1f}{min(g for _, g in rs):>18.2f}")
    local_gap, ray_gap = min(g for _, g in results["local ×1"]), min(g for _, g in results["ray ×1"])
    print(f"Ray scheduling overhead per job: {ray_gap - local_gap:+.2f} s between jobs "
          f"(local {local_gap:.2f} s, ray {ray_gap:.2f} s); wall, ray ×1 − local: "
          f"{(best['ray ×1'][0] - best['local ×1'][0]) / jobs:+.2f} s per job")
    print(f"wall(ray ×2) / wall(ray ×1) = {best['ray ×2'][0] / best['ray ×1'][0]:.2f}")
    ray.shutdown()  # now, not in an exit hook racing the interpreter's teardown


if __name__ == "__main__":
    main()
