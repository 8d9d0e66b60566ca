"""Make saved drafters load in vLLM with the attention they were trained with.

speculators trains DFlash blocks with *non-causal* attention in full-attention
layers but saves ``"sliding_window_non_causal": false`` by default, which vLLM
serves as causal blocks in every layer (the rule is in
:mod:`specbench.zoo.draft_attention`; a probe saw τ 1.80 instead of 2.12).
Our drafters have no sliding-window layers, so setting the flag to ``true``
changes nothing in speculators and makes vLLM serve non-causal blocks, as
trained. vLLM's DSpark model is always non-causal within a block, so DSpark
needs no fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from specbench.zoo.draft_attention import FLAG, block_attention, checkpoint_block_attention


def serve_config_fixes(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fix a DFlash-family drafter config dict in place (and return it)."""
    info = block_attention(cfg)
    if info is not None and info["mismatch"] and info["trained"] == "non-causal":
        cfg[FLAG] = True
    return cfg


def dflash_served_causal(checkpoint_dir: Path) -> bool:
    """Whether vLLM will serve this DFlash checkpoint with causal block attention."""
    info = checkpoint_block_attention(checkpoint_dir)
    return info is not None and info["served"] == "causal"


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
