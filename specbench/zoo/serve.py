"""Make saved drafters load in vLLM with the attention they were trained with.

speculators trains DFlash blocks with *non-causal* attention inside each
draft block whenever a layer uses full attention (its
``sliding_window_non_causal`` flag only matters for sliding-window layers),
but saves ``"sliding_window_non_causal": false`` by default. vLLM's
speculators config converter (``vllm/transformers_utils/configs/speculators/
algos.py::update_dflash``) maps that flag to ``dflash_config.causal =
not sliding_window_non_causal`` for *every* layer, so the default checkpoint
is served with causal block attention it was never trained with (a probe saw
τ 1.80 instead of 2.12). Our drafters have no sliding-window layers, so
setting the flag to ``true`` changes nothing in speculators and makes vLLM
serve non-causal blocks, as trained.

vLLM's DSpark model is always non-causal within a block, so DSpark needs no fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

FLAG = "sliding_window_non_causal"


def _has_sliding_layers(cfg: dict[str, Any]) -> bool:
    tl = cfg.get("transformer_layer_config") or {}
    return any(t == "sliding_attention" for t in (tl.get("layer_types") or [])) or bool(
        tl.get("use_sliding_window")
    )


def serve_config_fixes(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fix a DFlash-family drafter config dict in place (and return it)."""
    algo = (cfg.get("speculators_config") or {}).get("algorithm") or cfg.get("speculators_model_type")
    if algo == "dflash" and not _has_sliding_layers(cfg):
        cfg[FLAG] = True
    return cfg


def dflash_served_causal(checkpoint_dir: Path) -> bool:
    """Whether vLLM will serve this DFlash checkpoint with causal block attention."""
    cfg = json.loads((Path(checkpoint_dir) / "config.json").read_text())
    return not cfg.get(FLAG, True)


def flip_dflash_attention(checkpoint_dir: Path, out_dir: Path) -> Path:
    """Copy a DFlash checkpoint with the served block attention flipped.

    A correctly served tiny DFlash becomes causal in vLLM (and vice versa)
    while the weights stay the same: a deliberate train/serve mismatch, used
    to show that the reference-vs-vLLM cross-check catches it.
    """
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.copytree(checkpoint_dir, out_dir)
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg[FLAG] = not cfg.get(FLAG, False)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return out_dir
