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
--prompts 24 --rounds 2 --dtype bfloat16 --k 3``, or on finished runs (each a round):
``python benchmarks/parallel_vs_eagle3.py --runs RUN_DIR ...``. Prints a table; asserts nothing.
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


def pool_round(run_dir: Path, rnd: int, others: list[str], per_round: dict[str, list[str]],
               pooled: dict[str, list], note: str) -> None:
    """Add one round (a run) to ``per_round`` (its headline ratios) and ``pooled`` (its requests, as repeat ``rnd``).

    The first (target, dataset, load) of the run's headline at temperature 0 counts (the rounds this script runs
    have one); each arm's requests are those of the group the headline compared (its best K), EAGLE-3's once.
    """
    s = api.load_summary(run_dir)
    rows = [r for r in s.headline if r.method in others and r.temperature == 0]
    if not rows:
        raise SystemExit(f"{run_dir}: no headline row of {others} against EAGLE-3 at T=0")
    key = (rows[0].target, rows[0].dataset, rows[0].batch_size, rows[0].request_rate)
    rows = [r for r in rows if (r.target, r.dataset, r.batch_size, r.request_rate) == key]
    groups = {r.method_group: r.method for r in rows} | {rows[0].reference_group: "eagle3"}
    for row in rows:
        per_round[row.method].append(f"{row.speedup_ratio.fmt()} ({note})")
    for r in metrics.unique_requests(rundir.read_requests(run_dir)):
        method = groups.get(r.cell_id.rsplit("/", 1)[0])
        if method is not None:
            pooled[method].append(r.model_copy(update={"repeat": rnd}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--methods", default="dflash,p-eagle")
    ap.add_argument("--runs", nargs="+", type=Path, default=None,
                    help="pool these finished runs (one round each, e.g. cpu-smoke's) instead of running rounds")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: 1 prompt, 2 rounds, 16 tokens, float32 (with --runs: just those)")
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.rounds, args.max_tokens, args.dtype = 1, 2, 16, "float32"
    others = [m for m in args.methods.split(",") if m]
    per_round: dict[str, list[str]] = {m: [] for m in others}
    pooled: dict[str, list] = {m: [] for m in ["eagle3", *others]}
    if args.runs:
        for rnd, run_dir in enumerate(args.runs):
            pool_round(run_dir, rnd, others, per_round, pooled, run_dir.name)
        header = f"{len(args.runs)} run(s) given, each a round"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for rnd in range(args.rounds):
                order = ["eagle3", *others] if rnd % 2 == 0 else [*others[::-1], "eagle3"]
                path = Path(tmp) / f"round{rnd}.yaml"
                path.write_text(yaml.safe_dump(suite(args.prompts, args.dtype, args.k, order, args.max_tokens)))
                pool_round(api.run(path, out=Path(tmp) / "results"), rnd, others, per_round, pooled, "→".join(order))
        header = (f"{args.dtype}, K={args.k}, batch 1, {args.prompts} HumanEval prompts × {args.rounds} rounds "
                  "(engine order alternating)")
    print(f"\n{header}\n")
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
