"""Served vs trained DFlash block attention (vLLM's converter rule vs speculators' masks)."""

from __future__ import annotations

import json

from specbench.zoo.draft_attention import FLAG, block_attention, checkpoint_block_attention


def cfg(algo: str, flag: bool | None, layer_types: list[str] | None = None) -> dict:
    c: dict = {"speculators_config": {"algorithm": algo}, "transformer_layer_config": {"num_hidden_layers": 2}}
    if flag is not None:
        c[FLAG] = flag
    if layer_types is not None:
        c["transformer_layer_config"]["layer_types"] = layer_types
    return c


def test_speculators_default_is_served_causal_but_trained_non_causal():
    info = block_attention(cfg("dflash", False))
    assert info == {
        "served": "causal",
        "trained": "non-causal",
        "mismatch": True,
        "why": info["why"],
    }
    assert FLAG in info["why"] and "false" in info["why"]
    assert block_attention(cfg("dflash", None))["mismatch"] is True  # a missing flag reads as false


def test_flag_true_serves_what_was_trained():
    assert block_attention(cfg("dflash", True)) == {
        "served": "non-causal",
        "trained": "non-causal",
        "mismatch": False,
        "why": "",
    }


def test_sliding_layers_follow_the_flag_in_training_too():
    only_sliding = block_attention(cfg("dflash", False, ["sliding_attention", "sliding_attention"]))
    assert only_sliding["trained"] == "causal" and only_sliding["mismatch"] is False
    mixed = block_attention(cfg("dflash", False, ["sliding_attention", "full_attention"]))
    assert mixed["trained"] == "mixed" and mixed["mismatch"] is True


def test_other_drafters_have_no_block_attention_rule():
    assert block_attention(cfg("eagle3", False)) is None
    assert block_attention(cfg("dspark", False)) is None  # vLLM's DSpark is always non-causal


def test_checkpoint_reader(tmp_path):
    assert checkpoint_block_attention(None) is None
    assert checkpoint_block_attention("org/hub-model") is None  # not a local directory
    (tmp_path / "config.json").write_text(json.dumps(cfg("dflash", False)))
    assert checkpoint_block_attention(tmp_path)["served"] == "causal"
    (tmp_path / "config.json").write_text("{not json")
    assert checkpoint_block_attention(tmp_path) is None
