"""Two CPU engines side by side: with and without binding each to its own cores.

Ray's CPU resources are counts, not core ids, so two vLLM CPU engines placed on
one node run their OpenMP threads over the same cores. The Ray executor binds
each engine on a CPU node to a disjoint core set (``cpu_slots``: the process's
affinity, ``OMP_NUM_THREADS`` and ``VLLM_CPU_OMP_THREADS_BIND``). This measures
what that buys, without Ray, on the tiny zoo target (greedy, ``ignore_eos``):

* solo: one engine bound to core ``i`` generates its share while the other bound
  engine is idle (once per core);
* bound pair: both bound engines generate the same share at the same moment;
* unbound pair: two fresh engines with neither affinity nor thread count set
  (each sizes its pool for every core) generate the same share together.

Each phase's wall is the generate call's own (engine start excluded), the median
over ``--repeats``. The check the project asks for: each engine of the bound pair
takes at most 1.2 × its solo wall. At most two engines are alive at once.

    .venv/bin/python benchmarks/cpu_binding.py [--prompts 8] [--max-tokens 96] [--repeats 3]
    .venv/bin/python benchmarks/cpu_binding.py --smoke   # the smallest size (a test runs it)

Needs at least 2 cores in this process's affinity. Walls on a shared machine are
noisy: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TAG = "CPU-BINDING "  # the worker's answer lines (vLLM logs share its stdout)


def worker(cpus: str | None, prompts: int, max_tokens: int) -> None:
    """One engine: bind (or not), start, then generate the share on every ``go`` line of stdin."""
    from specbench.execution.executors.cpu_slots import binding_env, parse_cpu_list

    if cpus:
        ids = parse_cpu_list(cpus)
        os.sched_setaffinity(0, ids)  # before torch: the OpenMP pool starts on these cores
        os.environ.update(binding_env(ids))
    else:
        for name in binding_env([0]):
            os.environ.pop(name, None)
    os.environ.update({"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from specbench.zoo.assets import ensure_assets

    target = str(ensure_assets().target)
    from vllm import LLM, SamplingParams

    llm = LLM(model=target, dtype="float32", max_model_len=512, enforce_eager=True, seed=0)
    share = [{"prompt_token_ids": [5 + i, 17, 99, 230, 4 + i]} for i in range(prompts)]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    llm.generate(share[:1], SamplingParams(temperature=0.0, max_tokens=4), use_tqdm=False)  # first-call costs
    print(TAG + json.dumps({"ready": True, "affinity": sorted(os.sched_getaffinity(0))}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        t0 = time.perf_counter()
        outs = llm.generate(share, params, use_tqdm=False)
        wall = time.perf_counter() - t0
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        print(TAG + json.dumps({"wall": wall, "tokens": tokens}), flush=True)


class Engine:
    """A worker process and its answers."""

    def __init__(self, cpus: str | None, prompts: int, max_tokens: int):
        cmd = [sys.executable, __file__, "--worker", "--prompts", str(prompts), "--max-tokens", str(max_tokens)]
        if cpus:
            cmd += ["--cpus", cpus]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self.log: list[str] = []

    def answer(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
            self.log.append(line)
        raise RuntimeError("engine worker ended:\n" + "".join(self.log[-40:]))

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def together(engines: list[Engine]) -> list[float]:
    """Every engine generates its share at the same moment; each one's wall."""
    for e in engines:
        e.go()
    return [e.answer()["wall"] for e in engines]


def measure(prompts: int, max_tokens: int, repeats: int, cores: tuple[int, int]) -> dict[str, list[float]]:
    walls: dict[str, list[list[float]]] = {"solo": [], "bound_pair": [], "unbound_pair": []}
    bound = [Engine(str(c), prompts, max_tokens) for c in cores]
    try:
        for e in bound:
            e.answer()  # ready
        for _ in range(repeats):
            walls["solo"].append([together([e])[0] for e in bound])
            walls["bound_pair"].append(together(bound))
    finally:
        for e in bound:
            e.close()
    unbound = [Engine(None, prompts, max_tokens) for _ in cores]
    try:
        for e in unbound:
            e.answer()
        for _ in range(repeats):
            walls["unbound_pair"].append(together(unbound))
    finally:
        for e in unbound:
            e.close()
    return {k: [statistics.median(run[i] for run in v) for i in range(len(cores))] for k, v in walls.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=8, help="prompts in each engine's share (one batch)")
    ap.add_argument("--max-tokens", type=int, default=96, help="tokens generated per prompt")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each phase (the median is printed)")
    ap.add_argument("--smoke", action="store_true", help="the smallest size: 2 prompts, 8 tokens, 1 repeat")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cpus", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.cpus, args.prompts, args.max_tokens)
        return 0
    if args.smoke:
        args.prompts, args.max_tokens, args.repeats = 2, 8, 1
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        print(f"needs 2 cores in this process's affinity, has {mine}", file=sys.stderr)
        return 2
    cores = (mine[0], mine[1])
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    walls = measure(args.prompts, args.max_tokens, args.repeats, cores)
    load1 = os.getloadavg()
    print(f"cpu binding: each engine generates {args.prompts} prompts × {args.max_tokens} tokens "
          f"(tiny target, greedy), median of {args.repeats}; cores {cores[0]} and {cores[1]}")
    print(f"{'phase':<14}{'engine A':>10}{'engine B':>10}   (wall, s)")
    for name, label in (("solo", "solo, bound"), ("bound_pair", "bound pair"), ("unbound_pair", "unbound pair")):
        a, b = walls[name]
        print(f"{label:<14}{a:>10.3f}{b:>10.3f}")
    ratios = [p / s for p, s in zip(walls["bound_pair"], walls["solo"], strict=True)]
    unbound = [p / s for p, s in zip(walls["unbound_pair"], walls["solo"], strict=True)]
    print(f"bound pair / solo: {ratios[0]:.2f}, {ratios[1]:.2f} (check: at most 1.2: "
          f"{'yes' if max(ratios) <= 1.2 else 'NO'})")
    print(f"unbound pair / solo: {unbound[0]:.2f}, {unbound[1]:.2f}")
    print(f"load average (1 min) before {load0[0]:.2f}, after {load1[0]:.2f}; {time.perf_counter() - t0:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
