"""The zoo's quick training mode (CI): everything trains for a few seconds and saves."""

from __future__ import annotations

import json
import os

from specbench.zoo import QUICK_DRAFTER_STEPS, train_config
from specbench.zoo.assets import ensure_assets


def test_quick_zoo_trains_and_caches(tmp_path):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    a = ensure_assets(tmp_path, train=True, quick=True, progress=False)
    assert a.trained and "trained-quick" in a.root.name
    t = a.info["target_training"]
    q = train_config(quick=True)["target"]
    assert t["steps"] == q["tokens"] // (q["batch_size"] * q["seq_len"]) == 16
    assert t["heldout_loss"] < 8.3  # below uniform (ln 4096 ≈ 8.32)
    d = a.info["drafter_training"]
    for kind in ("eagle3", "p-eagle", "dflash", "dspark"):
        # A fixed step count, not a time budget: a 3-second CPU-time budget gave a busy
        # machine a handful of steps (one, at worst), and the "final" loss then
        # averaged in the first.
        assert d[kind]["steps"] == QUICK_DRAFTER_STEPS, kind
        assert d[kind]["final_loss"] < d[kind]["first_loss"], kind
        assert (a.speculators[kind] / "model.safetensors").is_file()
    cfg = json.loads((a.speculators["dflash"] / "config.json").read_text())
    assert cfg["sliding_window_non_causal"] is True  # served non-causal, as trained
    assert ensure_assets(tmp_path, train=True, quick=True, progress=False).root == a.root
    # an untrained build is a different cache entry
    assert ensure_assets(tmp_path, progress=False).root != a.root
