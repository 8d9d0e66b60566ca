"""Zoo pieces that need no training: packing, schedules, budgets, served attention."""

from __future__ import annotations

import torch

from specbench.zoo import QUICK_DRAFTER_STEPS, train_config
from specbench.zoo.drafter_training import pack
from specbench.zoo.serve import serve_config_fixes
from specbench.zoo.target_training import lr_at


def _pool(n_docs: int = 3, length: int = 8, h: int = 2) -> dict[str, torch.Tensor]:
    ids = torch.arange(n_docs * length).view(n_docs, length)
    aux = ids[..., None].float().expand(n_docs, length, 3 * h).clone()
    last = -ids[..., None].float().expand(n_docs, length, h).clone()
    return {"ids": ids, "aux": aux, "last": last}


def test_pack_unshifted_marks_documents_and_block_edges():
    b = pack(_pool(), [2, 0], shift=False, edge=3)
    assert b["input_ids"].shape == (1, 16)
    assert b["document_ids"][0].tolist() == [0] * 8 + [1] * 8
    assert b["position_ids"][0].tolist() == list(range(8)) * 2
    # no DFlash block may start where it would run into the next document
    assert b["loss_mask"][0].tolist() == ([True] * 5 + [False] * 3) * 2
    assert b["input_ids"][0, :8].tolist() == list(range(16, 24))


def test_pack_shifted_aligns_token_with_previous_state():
    p = _pool()
    b = pack(p, [1, 2], shift=True, edge=2)
    assert b["input_ids"].shape == (1, 14)
    # token t+1 with the target state of t, and the verifier state of t+1
    assert b["input_ids"][0, 0] == p["ids"][1, 1]
    assert b["hidden_states"][0, 0, 0] == p["aux"][1, 0, 0]
    assert b["verifier_last_hidden_states"][0, 0, 0] == p["last"][1, 1, 0]
    assert b["position_ids"][0, :7].tolist() == list(range(1, 8))
    # the second document's first ttt_steps-1 targets would come from the first one's end
    assert b["loss_mask"][0].tolist() == [True] * 7 + [False, False] + [True] * 5


def test_lr_schedule():
    assert lr_at(0.0, 1.0) > 0
    assert abs(lr_at(0.05, 1.0) - 1.0) < 1e-9
    assert abs(lr_at(1.0, 1.0) - 0.1) < 1e-9
    xs = [lr_at(f / 100, 1.0) for f in range(5, 101)]
    assert all(a >= b for a, b in zip(xs, xs[1:], strict=False))


def test_budgets_are_steps_not_seconds():
    """A fixed number of steps per drafter: the same zoo on every machine, however busy."""
    full, quick = train_config(False), train_config(True)
    kinds = full["drafters"]["per_kind"]
    assert set(kinds) == {"eagle3", "p-eagle", "dflash", "dspark"}
    for cfg in (full, quick):
        for v in cfg["drafters"]["per_kind"].values():
            assert isinstance(v["steps"], int) and v["steps"] > 0
            assert "seconds" not in v and "min_steps" not in v
    assert all(v["steps"] == QUICK_DRAFTER_STEPS for v in quick["drafters"]["per_kind"].values())
    assert all(v["steps"] >= 100 for v in kinds.values())


def test_serve_fix_only_for_dflash_without_sliding_layers():
    def cfg(algo: str, layer_types: list[str]) -> dict:
        return {
            "speculators_model_type": algo,
            "sliding_window_non_causal": False,
            "transformer_layer_config": {"layer_types": layer_types},
        }

    assert serve_config_fixes(cfg("dflash", ["full_attention"]))["sliding_window_non_causal"] is True
    assert serve_config_fixes(cfg("dflash", ["sliding_attention"]))["sliding_window_non_causal"] is False
    assert serve_config_fixes(cfg("dspark", ["full_attention"]))["sliding_window_non_causal"] is False


def test_a_drafters_depth_is_its_kinds_num_layers(tmp_path, monkeypatch):
    """``num_layers`` in a kind's entry of DRAFTER_KINDS sets its depth (DRAFTER_COMMON's without one) and is
    not passed on to the model class as a training argument; ``build_drafter(num_layers=)`` overrides both."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from specbench.zoo import assets

    Qwen3ForCausalLM(Qwen3Config(**assets.TARGET_CONFIG)).save_pretrained(tmp_path)  # drafters read its head
    monkeypatch.setitem(assets.DRAFTER_KINDS, "p-eagle", {**assets.DRAFTER_KINDS["p-eagle"], "num_layers": 3})
    monkeypatch.setitem(assets.DRAFTER_KINDS, "dflash", {k: v for k, v in assets.DRAFTER_KINDS["dflash"].items()
                                                         if k != "num_layers"})
    assert assets.drafter_layers("p-eagle") == 3
    assert assets.drafter_layers("dflash") == assets.DRAFTER_COMMON["num_layers"]
    assert len(assets.build_drafter("p-eagle", tmp_path, mask_token_id=3).layers) == 3
    assert len(assets.build_drafter("dflash", tmp_path, mask_token_id=3).layers) == assets.DRAFTER_COMMON["num_layers"]
    assert len(assets.build_drafter("dflash", tmp_path, mask_token_id=3, num_layers=2).layers) == 2
