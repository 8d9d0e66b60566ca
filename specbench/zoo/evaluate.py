"""Measure the zoo in vLLM CPU: τ at K (greedy, held-out prompts) and token identity.

Each method runs in its own subprocess (a failing engine, e.g. DSpark on
CPU, cannot take the others down) and reports its outputs and vLLM's
spec-decode counter deltas as JSON. Run it under the CPU lock::

    flock /tmp/specbench-cpu.lock python -m specbench.zoo.evaluate --train

This is a development tool for the zoo (issue 7 checks), not the benchmark
runner.
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
from typing import Any

from specbench.config.methods import get_method
from specbench.results import counters

METHODS = ("baseline", "eagle3", "p-eagle", "dflash", "dspark")


def _counters(llm) -> dict[str, Any]:
    """The engine's cumulative spec-decode counters (:func:`counters.from_offline`), in the JSON shape
    this tool reports."""
    c = counters.from_offline(llm.get_metrics())
    return {"drafts": c.num_drafts, "draft_tokens": c.num_draft_tokens, "accepted": c.num_accepted_tokens,
            "per_pos": c.accepted_per_pos}


def run_one(
    kind: str, root: Path, k: int, prompts: list[list[int]], max_tokens: int, checkpoint: str | None = None
) -> dict[str, Any]:
    """Start one engine in this process, generate greedily, return outputs + counters."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # as engines on CPU run (vllm_args.platform_defaults)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec_path = checkpoint or (str(root / "speculators" / kind) if kind != "baseline" else "")
    t0 = time.perf_counter()
    llm = LLM(
        model=str(root / "target"),
        speculative_config=get_method(kind).speculative_config(k, spec_path or None),
        enforce_eager=True,
        max_model_len=1024,
        seed=0,
        dtype="float32",
        disable_log_stats=False,  # get_metrics() needs the stat loggers
    )
    start_s = time.perf_counter() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    # One request at a time, as in the harness's batch-size-1 cells.
    before = _counters(llm)
    t1 = time.perf_counter()
    outs = []
    for p in prompts:
        r = llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)
        outs.append(list(r[0].outputs[0].token_ids))
    gen_s = time.perf_counter() - t1
    after = _counters(llm)
    n = max(len(after["per_pos"]), len(before["per_pos"]))
    pb = before["per_pos"] + [0] * (n - len(before["per_pos"]))
    pa = after["per_pos"] + [0] * (n - len(after["per_pos"]))
    c = {
        "drafts": after["drafts"] - before["drafts"],
        "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "accepted": after["accepted"] - before["accepted"],
        "per_pos": [a - b for a, b in zip(pa, pb, strict=True)],
    }
    return {"kind": kind, "outputs": outs, "counters": c, "start_s": start_s, "gen_s": gen_s}


def counter_delta_tau(c: dict[str, Any]) -> float | None:
    """τ of a reported counter delta (:func:`counters.tau`; ``None`` without drafts)."""
    return float(counters.tau(c["accepted"], c["drafts"])) if c.get("drafts") else None


def evaluate(
    root: Path,
    kinds: tuple[str, ...] = METHODS,
    *,
    k: int = 3,
    n: int = 16,
    max_tokens: int = 64,
    checkpoints: dict[str, str] | None = None,
    prompts: list[list[int]] | None = None,
) -> dict[str, Any]:
    """Run every kind in a subprocess; compare each with the baseline's outputs.

    ``checkpoints`` overrides a kind's drafter directory (e.g. a DFlash copy made
    by :func:`specbench.zoo.serve.flip_dflash_attention`); ``prompts`` (token ids)
    replaces the ``n`` held-out prompts.
    """
    if prompts is None:
        from transformers import AutoTokenizer

        from specbench.zoo.data import heldout_prompts

        prompts = heldout_prompts(AutoTokenizer.from_pretrained(root / "target"), n=n)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as td:
        pfile = Path(td) / "prompts.json"
        pfile.write_text(json.dumps(prompts))
        for kind in kinds:
            out = Path(td) / f"{kind}.json"
            cmd = [
                sys.executable,
                "-m",
                "specbench.zoo.evaluate",
                "--one",
                kind,
                "--root",
                str(root),
                "--k",
                str(k),
                "--max-tokens",
                str(max_tokens),
                "--prompts",
                str(pfile),
                "--json",
                str(out),
            ]
            if checkpoints and kind in checkpoints:
                cmd += ["--checkpoint", f"{kind}={checkpoints[kind]}"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode == 0 and out.is_file():
                results[kind] = json.loads(out.read_text())
            else:
                results[kind] = {
                    "kind": kind,
                    "error": _error_line(proc.stderr),
                    "log_tail": proc.stderr[-4000:],
                }
    base = results.get("baseline", {}).get("outputs")
    for r in results.values():
        if "outputs" in r and "counters" in r:
            r["tau"] = counter_delta_tau(r["counters"])
            if base is not None:
                r["identical"] = r["outputs"] == base
                r["identical_requests"] = sum(a == b for a, b in zip(r["outputs"], base, strict=True))
    return {"k": k, "n": len(prompts), "max_tokens": max_tokens, "results": results}


def _error_line(stderr: str) -> str:
    """The last exception of a traceback (the error vLLM raised), with its detail lines."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        ln = lines[i]
        if ("Error" in ln or "Exception" in ln) and ":" in ln and not ln.startswith(" "):
            detail = [
                d.strip() for d in lines[i + 1 : i + 4] if d.startswith(" ") and "errors.pydantic" not in d
            ]
            return " ".join([ln.strip(), *detail])
    return lines[-1] if lines else ""


def evaluate_main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, help="an assets root (default: ensure_assets)")
    ap.add_argument("--prompts", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="write results here")
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--checkpoint", action="append", default=[], metavar="KIND=PATH", help="drafter override")
    a = ap.parse_args(argv)
    checkpoints = dict(c.split("=", 1) for c in a.checkpoint)
    if a.one:
        prompts = json.loads(a.prompts.read_text())
        res = run_one(a.one, a.root, a.k, prompts, a.max_tokens, checkpoints.get(a.one))
        a.json.write_text(json.dumps(res))
        return
    root = a.root
    if root is None:
        from specbench.zoo.assets import ensure_assets

        root = ensure_assets(train=a.train, quick=a.quick, seed=a.seed).root
    res = evaluate(
        root, tuple(a.methods.split(",")), k=a.k, n=a.n, max_tokens=a.max_tokens, checkpoints=checkpoints
    )
    for kind, r in res["results"].items():
        if "error" in r:
            print(f"{kind:8s} FAILED: {r['error']}")
        else:
            t = r.get("tau")
            print(
                f"{kind:8s} tau={t if t is None else round(t, 3)} identical={r.get('identical')} "
                f"({r.get('identical_requests')}/{res['n']}) per_pos={r['counters']['per_pos']} "
                f"drafts={r['counters']['drafts']} start={r['start_s']:.1f}s gen={r['gen_s']:.1f}s"
            )
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    evaluate_main()
