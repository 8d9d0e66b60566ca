"""What the Ray executor costs and what a second slot buys, from one run.

Runs the same 4-engine suite (tiny zoo, vLLM CPU) three times in one process:
``local`` (one engine at a time, in this process's children), ``ray`` with one
slot (``--max-parallel-engines 1``, the same serial work) and ``ray`` with two
slots. It prints the wall time of each (the engine part of ``specbench run``:
``Runner.run``), the Ray executor's scheduling overhead per job
((ray×1 − local) / jobs: task scheduling, worker start, imports, event
streaming) and the 2-slot / 1-slot wall-time ratio.

    .venv/bin/python benchmarks/executor_overhead.py [--prompts 4] [--max-tokens 48]

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

SUITE = """
name: executor-overhead
targets:
  - name: tiny
    model: tiny
    assets: trained
    dtype: float32
    max_model_len: 1024
    methods:
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
      - name: self-draft
        method: draft_model
        speculator: target
        num_speculative_tokens: 3
      - method: eagle3
        speculator: tiny:eagle3
        num_speculative_tokens: 3
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


def timed_run(suite_path: Path, out: Path, executor: str, slots: int | None) -> float:
    from specbench import api
    from specbench.executors import make_executor
    from specbench.plan import expand
    from specbench.runner import Runner
    from specbench.store import new_run_id

    suite = api.load_suite(suite_path)
    plan = expand(suite)
    run_dir = out / f"{executor}-{slots}"
    run_dir.mkdir(parents=True)
    runner = Runner(suite, plan, run_dir, new_run_id(), executor=make_executor(executor, max_parallel=slots))
    t0 = time.perf_counter()
    runner.run()
    wall = time.perf_counter() - t0
    failed = [c for c in api.store.read_cells(run_dir) if c.status != "ok"]
    if failed:
        raise SystemExit(f"{executor}×{slots}: {len(failed)} cells not ok: {failed[0].reason}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--ray-address", default=None)
    args = ap.parse_args()
    import ray

    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:
        ray.init(num_gpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "suite.yaml"
        suite.write_text(SUITE.format(prompts=args.prompts, max_tokens=args.max_tokens))
        jobs = 4
        walls = {
            "local ×1": timed_run(suite, Path(tmp), "local", None),
            "ray ×1": timed_run(suite, Path(tmp), "ray", 1),
            "ray ×2": timed_run(suite, Path(tmp), "ray", 2),
        }
    print(f"{'executor × slots':<18}{'wall (s)':>10}")
    for name, wall in walls.items():
        print(f"{name:<18}{wall:>10.1f}")
    print(f"Ray scheduling overhead per job: {(walls['ray ×1'] - walls['local ×1']) / jobs:+.2f} s "
          f"({jobs} jobs, same serial work)")
    print(f"wall(ray ×2) / wall(ray ×1) = {walls['ray ×2'] / walls['ray ×1']:.2f}")


if __name__ == "__main__":
    main()
