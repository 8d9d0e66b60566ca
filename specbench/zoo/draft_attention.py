"""Which draft-block attention vLLM serves a DFlash checkpoint with, and which it was trained with.

A speculators DFlash checkpoint holds one flag, ``sliding_window_non_causal``,
that the two sides read differently:

* speculators (training, and specbench's reference engine) always uses
  *non-causal* attention inside a draft block in full-attention layers; the
  flag only chooses it for sliding-window layers;
* vLLM's speculators converter (``transformers_utils/configs/speculators/
  algos.py::update_dflash``) sets ``dflash_config.causal = not flag`` for
  *every* layer.

So a checkpoint saved with the flag false (speculators 0.9.0's default) and
full-attention layers is served with causal blocks it was never trained with.
Whether that costs acceptance depends on how much the drafter attends to the
later slots of its block (see :mod:`specbench.zoo.block_attention`); the
mismatch itself is a fact of the config, reported by the cross-check next to
the τ comparison.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FLAG = "sliding_window_non_causal"
DFLASH_ALGORITHMS = ("dflash", "dflash2")  # both go through vLLM's update_dflash


def _layer_types(cfg: dict[str, Any]) -> list[str]:
    tl = cfg.get("transformer_layer_config") or {}
    n = int(tl.get("num_hidden_layers") or 1)
    types = list(tl.get("layer_types") or [])
    if not types:
        types = ["sliding_attention" if tl.get("use_sliding_window") else "full_attention"] * n
    return types


def block_attention(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """Served vs trained block attention of a speculators DFlash config (None for other drafters).

    Returns ``{"served", "trained", "mismatch", "why"}``; ``served`` and
    ``trained`` are ``"causal"``, ``"non-causal"`` or (trained only)
    ``"mixed"`` when layers differ.
    """
    algo = (cfg.get("speculators_config") or {}).get("algorithm") or cfg.get("speculators_model_type")
    if algo not in DFLASH_ALGORITHMS:
        return None
    flag = bool(cfg.get(FLAG, False))
    served = "non-causal" if flag else "causal"
    per_layer = ["non-causal" if (t != "sliding_attention" or flag) else "causal" for t in _layer_types(cfg)]
    trained = per_layer[0] if len(set(per_layer)) == 1 else "mixed"
    mismatch = any(t != served for t in per_layer)
    why = ""
    if mismatch:
        why = (
            f"vLLM serves {served} draft blocks ({FLAG}={str(flag).lower()} in config.json) "
            f"but the drafter was trained with {trained} blocks"
        )
    return {"served": served, "trained": trained, "mismatch": mismatch, "why": why}


def checkpoint_block_attention(path: str | Path | None) -> dict[str, Any] | None:
    """:func:`block_attention` of a local checkpoint directory (None when not local or not DFlash)."""
    if not path:
        return None
    cfg_path = Path(path) / "config.json"
    if not cfg_path.is_file():
        return None
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return None
    return block_attention(cfg) if isinstance(cfg, dict) else None
