"""Make "DFlash (or P-EAGLE) is faster than EAGLE-3" decisive: pair, alternate, size.

A probe ran the CPU zoo in bfloat16 (the target then costs ~15× more per token
than in float32, a target-to-drafter cost ratio closer to a GPU's): at batch 1
DFlash's speedup was 1.46× [0.94, 2.22] against EAGLE-3's 1.20× [0.75, 1.96],
too wide to call. This script measures the ratio the headline table reports —
per-stream output tok/s of a method over EAGLE-3's, paired by prompt — and:

* runs ``--rounds`` separate runs whose engine order alternates (ABAB… then
  BABA…), so machine drift (other jobs, clocks, thermal) hits both arms alike;
* pools every round's requests, pairing each prompt's requests within a round
  (a round is a repeat) and bootstrapping over prompts (all rounds of a prompt
  move together), with :func:`specbench.analysis.metrics.paired_speedup`, the same
  function the headline uses;
* prints, per method, the ratio with its interval, each round's own ratio, and
  the number of prompts a run of this kind needs for the interval to exclude 1
  (half-width scales as 1/√n: n × (half-width / |ratio − 1|)²).

Run (vLLM CPU, trained zoo): ``python benchmarks/parallel_vs_eagle3.py
--prompts 24 --rounds 2 --dtype bfloat16 --k 3``. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import yaml

from specbench import api
from specbench.analysis import metrics
from specbench.results import rundir

METHODS = {"eagle3": "tiny:eagle3", "p-eagle": "tiny:p-eagle", "dflash": "tiny:dflash"}


def suite(prompts: int, dtype: str, k: int, order: list[str], max_tokens: int) -> dict:
    methods = [{"method": m, "speculator": METHODS[m], "num_speculative_tokens": k} for m in order]
    return {
        "name": "parallel-vs-eagle3",
        "targets": [{"name": "tiny", "model": "tiny", "assets": "trained", "dtype": dtype, "max_model_len": 1024,
                     "hardware": "cpu", "methods": methods}],
        "datasets": [{"name": "humaneval", "kind": "humaneval", "limit": prompts}],
        "sampling": {"temperatures": [0.0], "max_tokens": max_tokens, "seed": 0},
        "load": {"batch_sizes": [1]},
        "compare_to": "eagle3",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--methods", default="dflash,p-eagle")
    args = ap.parse_args()
    others = [m for m in args.methods.split(",") if m]
    per_round: dict[str, list[str]] = {m: [] for m in others}
    pooled: dict[str, list] = {m: [] for m in ["eagle3", *others]}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            order = ["eagle3", *others] if rnd % 2 == 0 else [*others[::-1], "eagle3"]
            path = Path(tmp) / f"round{rnd}.yaml"
            path.write_text(yaml.safe_dump(suite(args.prompts, args.dtype, args.k, order, args.max_tokens)))
            run_dir = api.run(path, out=Path(tmp) / "results")
            s = api.load_summary(run_dir)
            for row in s.headline:
                per_round[row.method].append(f"{row.speedup_ratio.fmt()} ({'→'.join(order)})")
            for r in metrics.unique_requests(rundir.read_requests(run_dir)):
                method = r.cell_id.split("/")[1]
                pooled[method].append(r.model_copy(update={"repeat": rnd}))
    print(f"\n{args.dtype}, K={args.k}, batch 1, {args.prompts} HumanEval prompts × {args.rounds} rounds "
          "(engine order alternating)\n")
    print("| method | speedup over EAGLE-3 (pooled, paired by prompt) | per round | prompts to exclude 1 |")
    print("|---|---|---|---|")
    for m in others:
        est = metrics.paired_speedup(pooled[m], pooled["eagle3"])
        need = "–"
        if est.value is not None and est.ci_low is not None and est.ci_high is not None and est.value != 1:
            half = (est.ci_high - est.ci_low) / 2
            need = str(math.ceil(est.n * (half / abs(est.value - 1)) ** 2))
        print(f"| {m} | {est.fmt()} (n={est.n}) | {'; '.join(per_round[m])} | {need} |")


if __name__ == "__main__":
    main()
