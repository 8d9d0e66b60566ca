"""The CPU stand-in's regime (issue 50): a decode step's time against the target's weight bytes and the rows it
processes, in vLLM's CPU engine.

Each target is the zoo's trained target (``trained``) or its copy widened to N MLP units whose extra weights are
streamed and multiplied but add exactly zero to the output (:mod:`specbench.zoo.weight_bound`). For each, one
engine decodes greedily with ``ignore_eos`` at M = 1, 2, 4, … requests at once: a step then processes M rows, as
verifying K+1 tokens of B requests processes B·(K+1). The time per step is the generate call's wall over its
tokens per request (best of ``--repeats``; the prefill of 24 prompt tokens included, the same at every width).

On a GPU a step costs about the same from 1 to a few hundred rows (it streams the weights); verification is then
nearly free at low load and speculation stops paying once B·(K+1) makes the step compute-bound. The table says
where that happens here: the step's cost per MB of weights, and the ratio of M rows to fewer.

    .venv/bin/python benchmarks/target_regime.py [--widths trained,4096,16384,32768,65536] [--rows 1,2,4,8,16,64]
    .venv/bin/python benchmarks/target_regime.py --smoke   # the smallest size (a test runs it)

The engines run one at a time, in one worker process. Walls on a shared machine are noisy: compare the ratios
within one run, not the milliseconds across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TAG = "TARGET-REGIME "


def worker(models: list[str], rows: list[int], tokens: int, repeats: int) -> None:
    """One engine after another, in this process (vLLM imported once, its engine core in-process): ms per step at
    each row count, one tagged JSON line per model."""
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TORCHDYNAMO_DISABLE": "1",
                       "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    import gc

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    for model in models:
        llm = LLM(model=model, dtype="float32", max_model_len=512, enforce_eager=True, seed=0,
                  max_num_seqs=max(rows))
        llm.generate([TokensPrompt(prompt_token_ids=[7, 8, 9])], SamplingParams(temperature=0.0, max_tokens=4),
                     use_tqdm=False)  # first-call costs
        out = {}
        for m in rows:
            prompts = [TokensPrompt(prompt_token_ids=[10 + (i * 7 + j) % 3000 for j in range(24)]) for i in range(m)]
            walls = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                llm.generate(prompts, params, use_tqdm=False)
                walls.append(time.perf_counter() - t0)
            out[m] = 1000 * min(walls) / tokens
        print(TAG + json.dumps({"model": model, "ms": out}), flush=True)
        del llm
        gc.collect()


def measure(models: list[Path], rows: list[int], tokens: int, repeats: int) -> dict[str, dict[int, float]]:
    """``{model: {rows: ms per step}}``, every model measured in one worker process, one engine at a time."""
    proc = subprocess.run([sys.executable, __file__, "--worker", *map(str, models), "--rows", ",".join(map(str, rows)),
                           "--tokens", str(tokens), "--repeats", str(repeats)],
                          capture_output=True, text=True, check=False)
    found = [json.loads(ln[len(TAG):]) for ln in proc.stdout.splitlines() if ln.startswith(TAG)]
    if proc.returncode != 0 or len(found) != len(models):
        raise SystemExit(f"the engines failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {f["model"]: {int(k): v for k, v in f["ms"].items()} for f in found}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="trained,4096,16384,32768,65536",
                    help="'trained' and/or MLP widths of the weight-bound copy")
    ap.add_argument("--rows", default="1,2,4,8,16,64")
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="the smallest size: trained and 1024 units, M = 1 and 4")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.smoke:
        a.widths, a.rows, a.tokens, a.repeats = "trained,1024", "1,4", 8, 1
    rows = [int(x) for x in a.rows.split(",")]
    if a.worker:
        worker(a.worker, rows, a.tokens, a.repeats)
        return
    from specbench.zoo.assets import ensure_assets
    from specbench.zoo.weight_bound import widen_target

    trained = ensure_assets(train=True).target
    print(f"# target regime: ms per decode step at M rows (load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus)\n")
    print("| target | MB | " + " | ".join(f"M={m}" for m in rows) + " | " +
          " | ".join(f"M={b}/M={s}" for s, b in zip(rows, rows[1:], strict=False)) + " |")
    print("|---|---:|" + "---:|" * (2 * len(rows) - 1))
    points = []
    with tempfile.TemporaryDirectory(prefix="target-regime-") as tmp:
        paths = {}
        for w in a.widths.split(","):
            paths[w] = trained if w == "trained" else Path(tmp) / f"wide-{w}"
            if w != "trained":
                widen_target(trained, paths[w], int(w))
        measured = measure(list(paths.values()), rows, a.tokens, a.repeats)
        for w, path in paths.items():
            mb = (path / "model.safetensors").stat().st_size / 1e6
            ms = measured[str(path)]
            points.append((mb, ms[rows[0]]))
            ratios = [ms[b] / ms[s] for s, b in zip(rows, rows[1:], strict=False)]
            print(f"| {w} | {mb:.0f} | " + " | ".join(f"{ms[m]:.2f}" for m in rows) + " | " +
                  " | ".join(f"{r:.2f}" for r in ratios) + " |", flush=True)
    if len(points) >= 2:
        (x0, y0), (x1, y1) = min(points), max(points)
        print(f"\nstep at M={rows[0]}: {(y1 - y0) / (x1 - x0):+.4f} ms per MB of weights "
              f"({x0:.0f} → {x1:.0f} MB: {y0:.2f} → {y1:.2f} ms)")


if __name__ == "__main__":
    main()
