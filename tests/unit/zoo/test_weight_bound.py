"""The weight-bound target (specbench.zoo.weight_bound): the trained function, carried by real extra weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from specbench.zoo.weight_bound import ensure_weight_bound, weight_bound_dir, widen_target


@pytest.fixture(scope="module")
def small_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random small Qwen3 saved as the zoo saves its target (fp32 safetensors)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, tie_word_embeddings=False,
                      max_position_embeddings=128)
    out = tmp_path_factory.mktemp("target")
    Qwen3ForCausalLM(cfg).float().save_pretrained(out, safe_serialization=True)
    return out


def _logits(path: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(ids).logits


def test_the_widened_target_computes_the_trained_function(small_target: Path, tmp_path: Path) -> None:
    info = widen_target(small_target, tmp_path / "wide", 1024)
    ids = torch.randint(0, 256, (3, 40), generator=torch.Generator().manual_seed(1))
    a, b = _logits(small_target, ids), _logits(tmp_path / "wide", ids)
    assert torch.equal(a.argmax(-1), b.argmax(-1))
    assert (a - b).abs().max().item() < 1e-4 * a.abs().max().item()
    assert info["extra_units"] == 1024 - 96
    assert info["bytes"] - info["trained_bytes"] >= 2 * 3 * 64 * (1024 - 96) * 4  # layers × matrices × fp32


def test_the_extra_units_are_real_weights_whose_output_is_exactly_zero(small_target: Path, tmp_path: Path) -> None:
    """What makes a step cost more: non-zero gate/up rows in every layer (streamed and multiplied); what keeps the
    function: their down-projection columns are zero. Removing the extra cost, or making it anything but weights,
    fails here."""
    widen_target(small_target, tmp_path / "wide", 512)
    cfg = json.loads((tmp_path / "wide" / "config.json").read_text())
    assert cfg["intermediate_size"] == 512
    w = load_file(tmp_path / "wide" / "model.safetensors")
    trained = load_file(small_target / "model.safetensors")
    for layer in range(2):
        p = f"model.layers.{layer}.mlp."
        for name in ("gate_proj", "up_proj"):
            full = w[p + name + ".weight"]
            assert full.shape == (512, 64) and torch.equal(full[:96], trained[p + name + ".weight"])
            assert (full[96:] != 0).float().mean() > 0.99 and full[96:].std() > 0.1 * trained[p + name + ".weight"].std()
        down = w[p + "down_proj.weight"]
        assert down.shape == (64, 512) and torch.equal(down[:, :96], trained[p + "down_proj.weight"])
        assert torch.count_nonzero(down[:, 96:]) == 0


def test_built_once_beside_the_target_and_deterministic(small_target: Path, tmp_path: Path) -> None:
    import shutil

    target = tmp_path / "zoo" / "target"
    shutil.copytree(small_target, target)
    first = ensure_weight_bound(target, 256)
    assert first == weight_bound_dir(target, 256) and first.parent == target.parent
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_weight_bound(target, 256) == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    widen_target(target, tmp_path / "again", 256)
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="intermediate_size 64"):
        widen_target(target, tmp_path / "narrow", 64)
