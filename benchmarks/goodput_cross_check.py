"""Goodput: specbench against ``vllm bench serve`` on one server and one SLO set (issue 52).

One vLLM server (the CPU zoo's trained target with EAGLE-3 at K = 3, started by specbench and kept alive with
``api.run(keep=...)``) serves three passes of the same HumanEval prompts at the same concurrency, greedy,
``--max-tokens`` tokens each:

1. ``vllm bench serve`` without SLOs: a warm-up (the server's prefix cache then holds every prompt, as in the
   two measured passes) whose median TTFT and TPOT set the SLOs (each request meets one of them about half the
   time, so the share is informative), unless ``--slo`` gives them;
2. ``specbench run`` of a suite with that ``slo:`` (its group's ``goodput_share``: requests meeting every SLO of
   the requests sent, with its Wilson interval);
3. ``vllm bench serve --goodput ttft:… tpot:… e2el:…`` (its ``request_goodput`` × duration / completed: the
   same share, by vLLM's definition).

The check: each share lies inside the other run's binomial (Wilson, 95 %) interval, or at least inside the
smaller run's. The goodput rates (req/s) differ by definition where the durations do (specbench divides by the
cell's wall, vLLM by its benchmark's duration) and are printed beside.

    .venv/bin/python benchmarks/goodput_cross_check.py [--prompts 96 --concurrency 4 --max-tokens 64]
    .venv/bin/python benchmarks/goodput_cross_check.py --slo ttft:250,tpot:10,e2el:1000
    .venv/bin/python benchmarks/goodput_cross_check.py --smoke   # 4 prompts × 8 tokens (a test runs it)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def suite_doc(prompts: int, concurrency: int, max_tokens: int, slo: dict[str, float] | None) -> dict:
    doc = {
        "name": "goodput-cross-check",
        "targets": [{"name": "tiny", "model": "tiny", "assets": "trained", "dtype": "float32", "max_model_len": 512,
                     "hardware": "cpu", "engine": "vllm-server",
                     "methods": [{"method": "eagle3", "speculator": "tiny:eagle3", "num_speculative_tokens": 3}]}],
        "datasets": [{"name": "humaneval", "kind": "humaneval", "limit": prompts}],
        "sampling": {"temperatures": [0.0], "max_tokens": max_tokens, "seed": 0},
        "load": {"concurrency": [concurrency]},
        "warmup": False,
    }
    if slo:
        doc["slo"] = slo
    return doc


def bench_serve(base: str, model: str, dataset: Path, n: int, concurrency: int, max_tokens: int,
                slo: dict[str, float] | None) -> dict:
    """``vllm bench serve`` (vllm.benchmarks.serve, in this process) against ``base``; its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    p = FlexibleArgumentParser()
    add_cli_args(p)
    argv = ["--backend", "openai", "--base-url", base, "--endpoint", "/v1/completions", "--model", model,
            "--tokenizer", model, "--dataset-name", "custom", "--dataset-path", str(dataset),
            "--custom-output-len", str(max_tokens), "--skip-chat-template", "--num-prompts", str(n),
            "--max-concurrency", str(concurrency),
            "--request-rate", "inf", "--temperature", "0", "--disable-tqdm", "--ready-check-timeout-sec", "0",
            "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50"]
    if slo:
        argv += ["--goodput", *(f"{k}:{v:g}" for k, v in slo.items())]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        return main(p.parse_args(argv))


def meeting_by_hand(run_dir: Path, slo: dict[str, float]) -> int:
    """The requests of ``run_dir`` meeting every SLO, counted from records.jsonl as ``vllm bench serve`` counts
    (``calculate_metrics``: TTFT, TPOT = (latency − TTFT) / (output tokens − 1), 0 for one token, latency; each
    at most its SLO in ms)."""
    good = 0
    for line in (run_dir / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("error") is not None or r.get("latency_s") is None:
            continue
        n = len(r["output_token_ids"])
        tpot = (r["latency_s"] - r["ttft_s"]) / (n - 1) if n > 1 else 0.0
        got = {"ttft": r["ttft_s"], "tpot": tpot, "e2el": r["latency_s"]}
        good += all(got[k] * 1000 <= v for k, v in slo.items())
    return good


def wilson(k: int, n: int) -> tuple[float, float]:
    from specbench.stats import wilson_interval

    return wilson_interval(k, n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--slo", help="ttft:MS,tpot:MS,e2el:MS (default: the warm-up's medians of TTFT and TPOT)")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "specbench-goodput-cross-check")
    ap.add_argument("--smoke", action="store_true", help="the path at the smallest size: 4 prompts × 8 tokens")
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.concurrency, args.max_tokens = 4, 2, 8
        args.out = Path(tempfile.mkdtemp(prefix="goodput-cross-check-"))

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from specbench import api

    args.out.mkdir(parents=True, exist_ok=True)
    suite = args.out / "suite.yaml"
    suite.write_text(yaml.safe_dump(suite_doc(args.prompts, args.concurrency, args.max_tokens,
                                              {"ttft": 1e6}), sort_keys=False))
    t0 = time.monotonic()
    with api.KeptEngines(max_engines=1) as keep:
        first = api.run(suite, out=args.out, keep=keep)  # starts the server; its cells warm the prefix cache too
        engine = keep.idle_engines()[0]
        base, model = engine.base_url, str(engine.server_args["model"])
        prompts = [json.loads(line) for line in (first / "prompts.jsonl").read_text().splitlines()]
        dataset = args.out / "prompts-custom.jsonl"
        dataset.write_text("".join(json.dumps({"prompt": p["text"]}) + "\n" for p in prompts[: args.prompts]))
        warm = bench_serve(base, model, dataset, len(prompts), args.concurrency, args.max_tokens, None)
        if args.slo:
            slo = {k: float(v) for k, v in (kv.split(":") for kv in args.slo.split(","))}
        else:
            # A median TPOT of 0 (most warm-up outputs one token long: vLLM counts their TPOT as 0) is no SLO a
            # suite accepts (> 0): the smallest one printed, 0.01 ms, which those outputs meet in both clients.
            slo = {"ttft": round(float(warm["median_ttft_ms"]), 1),
                   "tpot": max(round(float(warm["median_tpot_ms"]), 2), 0.01)}
        suite.write_text(yaml.safe_dump(suite_doc(args.prompts, args.concurrency, args.max_tokens, slo),
                                        sort_keys=False))
        ours = api.run(suite, out=args.out, keep=keep)
        theirs = bench_serve(base, model, dataset, len(prompts), args.concurrency, args.max_tokens, slo)
    g = next(g for g in api.load_summary(ours).whole_groups if g.goodput_share is not None)
    n_s = g.goodput_share.n
    k_s = round(g.goodput_share.value * n_s)
    n_v = int(theirs["completed"])
    k_v = round(theirs["request_goodput"] * theirs["duration"])
    by_hand = meeting_by_hand(ours, slo)
    lo_s, hi_s = wilson(k_s, n_s)
    lo_v, hi_v = wilson(k_v, n_v)
    smaller = (lo_s, hi_s) if n_s <= n_v else (lo_v, hi_v)
    agree = smaller[0] <= k_s / n_s <= smaller[1] and smaller[0] <= k_v / n_v <= smaller[1]
    print(f"server {base} ({model}), EAGLE-3 K=3, concurrency {args.concurrency}, {len(prompts)} prompts × "
          f"{args.max_tokens} tokens; SLOs {slo} (ms); {time.monotonic() - t0:.0f} s in all")
    print(f"warm-up (vllm bench serve): median TTFT {warm['median_ttft_ms']:.1f} ms, TPOT {warm['median_tpot_ms']:.2f} "
          f"ms, E2EL {warm['median_e2el_ms']:.0f} ms\n")
    print("| client | requests | meeting every SLO | share [95 % Wilson] | goodput req/s | duration s |")
    print("|---|---|---|---|---|---|")
    print(f"| specbench ({ours.name}) | {n_s} | {k_s} | {k_s / n_s:.3f} [{lo_s:.3f}, {hi_s:.3f}] | "
          f"{g.goodput.value:.2f} | – |")
    print(f"| vllm bench serve | {n_v} | {k_v} | {k_v / n_v:.3f} [{lo_v:.3f}, {hi_v:.3f}] | "
          f"{theirs['request_goodput']:.2f} | {theirs['duration']:.1f} |")
    print(f"\nspecbench's count recomputed from records.jsonl with vllm bench serve's definition: {by_hand} "
          f"({'equal' if by_hand == k_s else 'DIFFERENT'})")
    print(f"both shares inside the smaller run's interval: {'yes' if agree else 'NO'}")
    return 0 if (agree and by_hand == k_s) or args.smoke else 1  # a smoke checks the path: 4 requests agree or not by chance


if __name__ == "__main__":
    sys.exit(main())
