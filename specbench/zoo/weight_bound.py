"""The zoo's trained target carried by a wider network whose step is bound by its weights (issue 50).

On a GPU a decode step streams the target's weights: verifying K+1 tokens costs little more than one at low
load, and speculation stops paying once batch × K makes the step compute-bound. The zoo's trained target
(a few MB of fp32 weights) sits in the CPU's caches, where the engine's own work per step dwarfs the forward
pass and every drafter is slower than none. The weight-bound target puts the stand-in in the GPU's regime
without training anything new:

* every MLP gets ``intermediate_size - trained`` extra units; their ``gate_proj`` and ``up_proj`` rows are
  random (seeded, the trained rows' scale), their ``down_proj`` columns are zero;
* a decode step reads every weight (the extra units are real weight traffic and real multiply-adds: no sleep,
  no patch), but each extra unit's activation is multiplied by an exact zero on its way back to the residual
  stream, so the network computes the trained target's function: outputs equal up to the order in which the
  matrix kernels add the same non-zero terms (measured: token-identical greedy outputs; docs/data.md).

The drafters keep their own sizes (they were trained on the trained target's hidden states, which these are).
:func:`ensure_weight_bound` builds the directory beside the zoo's trained target on first use (seconds: no
training), atomically, under the zoo's lock; its name carries the width and the build's version.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

#: Units per MLP of the weight-bound target: ~206 MB of fp32 weights, a plain step ~20 ms on the 2-core VMs
#: measured (docs/data.md, "The weight-bound target"), where verifying 4 tokens costs ~1.1× one.
WEIGHT_BOUND_INTERMEDIATE = 32768
BUILD_VERSION = "1"
_MLP_IN = ("mlp.gate_proj.weight", "mlp.up_proj.weight")
_MLP_OUT = "mlp.down_proj.weight"


def widen_target(src: Path, dst: Path, intermediate_size: int, *, seed: int = 0) -> dict[str, Any]:
    """Write ``src`` (a saved Qwen3-style target) widened to ``intermediate_size`` MLP units into ``dst``;
    returns what was built (sizes in bytes, extra units per layer)."""
    import torch
    from safetensors.torch import load_file, save_file

    cfg = json.loads((src / "config.json").read_text())
    trained = int(cfg["intermediate_size"])
    if intermediate_size < trained:
        raise ValueError(f"intermediate_size {intermediate_size} < the trained target's {trained}")
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy2(f, dst / f.name)
    weights = load_file(src / "model.safetensors")
    gen = torch.Generator().manual_seed(seed)
    extra = intermediate_size - trained
    out = {}
    for name in sorted(weights):
        w = weights[name]
        if name.endswith(_MLP_IN):
            added = torch.randn(extra, w.shape[1], generator=gen, dtype=torch.float32) * float(w.float().std())
            out[name] = torch.cat([w, added.to(w.dtype)], 0).contiguous()
        elif name.endswith(_MLP_OUT):
            out[name] = torch.cat([w, torch.zeros(w.shape[0], extra, dtype=w.dtype)], 1).contiguous()
        else:
            out[name] = w
    save_file(out, dst / "model.safetensors", metadata={"format": "pt"})
    cfg["intermediate_size"] = intermediate_size
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return {"trained_intermediate_size": trained, "intermediate_size": intermediate_size, "extra_units": extra,
            "trained_bytes": (src / "model.safetensors").stat().st_size,
            "bytes": (dst / "model.safetensors").stat().st_size}


def weight_bound_dir(target: Path, intermediate_size: int = WEIGHT_BOUND_INTERMEDIATE) -> Path:
    """Where the weight-bound copy of the zoo target ``target`` lives (beside it)."""
    return target.parent / f"target-weight-bound-{intermediate_size}-v{BUILD_VERSION}"


def ensure_weight_bound(target: Path, intermediate_size: int = WEIGHT_BOUND_INTERMEDIATE) -> Path:
    """The weight-bound copy of the zoo target ``target``, built on first use (atomic; one builder at a time)."""
    final = weight_bound_dir(target, intermediate_size)
    done = final / "weight_bound.json"
    if done.is_file():
        return final
    with open(target.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.building-", dir=target.parent))
        try:
            info = widen_target(target, tmp, intermediate_size)
            (tmp / "weight_bound.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
            tmp.chmod(0o755)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final
