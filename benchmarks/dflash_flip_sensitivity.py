"""How much a zoo DFlash drafter depends on non-causal attention inside its draft block.

The cross-check (issue 7) must flag a DFlash checkpoint served with causal
block attention although it was trained non-causal. Whether the flip changes
vLLM's τ at all depends on how much the trained drafter uses the later block
slots. This measures it in PyTorch, no vLLM: on held-out prompts continued
greedily by the target, every anchor's block is drafted twice with the same
weights — with the block attention it was trained with (non-causal) and with
causal block attention (what vLLM serves from a flipped flag) — and compared
with the target's greedy tokens.

    python benchmarks/dflash_flip_sensitivity.py [--zoo DIR ...] [--prompts 48] [--smoke]

Prints, per block slot, the draft's agreement with the target under each
attention, the fraction of drafts that change, and the mean accepted prefix
(1 + leading matches: a per-anchor proxy of greedy τ at K = block - 1).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    from specbench.zoo.assets import default_cache_dir, ensure_assets
    from specbench.zoo.block_attention import measure_checkpoint

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--zoo", type=Path, nargs="*", help="trained zoo directories (default: every one in the cache)"
    )
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--smoke", action="store_true", help="the smallest size: the suites' trained zoo, 2 prompts, 8 tokens")
    a = ap.parse_args()
    zoos = a.zoo or sorted(
        p for p in default_cache_dir().glob("tiny-trained-*") if (p / "manifest.json").exists()
    )
    if not zoos and not a.smoke:
        raise SystemExit(f"no trained zoo in {default_cache_dir()} (specbench assets --train)")
    if a.smoke:  # the trained zoo the suites use (built if missing)
        zoos, a.prompts, a.new_tokens = [ensure_assets(train=True, progress=False).target.parent], 2, 8
    print(f"{'zoo':44} {'anchors':>7} {'τ~ non-causal':>13} {'τ~ causal':>10} {'drop':>6}  changed per slot")
    for z in zoos:
        r = measure_checkpoint(z / "target", z / "speculators" / "dflash", a.prompts, a.new_tokens)
        print(
            f"{str(z)[-44:]:44} {r['anchors']:7d} {r['noncausal']['tau_proxy']:13.3f} "
            f"{r['causal']['tau_proxy']:10.3f} {r['tau_drop']:6.3f}  {r['changed_per_slot']}"
        )
        print("   ", json.dumps(r))


if __name__ == "__main__":
    main()
