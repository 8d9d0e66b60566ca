"""The CPU zoo: the tiny target and its drafters, trained locally (no hub).

:func:`specbench.zoo.assets.ensure_assets` with ``train=True`` calls
:func:`train_zoo_target` and then :func:`train_zoo_drafters`; their budgets come from
:func:`train_config` and are part of the asset cache key.
"""

from __future__ import annotations

from typing import Any

TRAIN_VERSION = "7"
QUICK_DRAFTER_STEPS = 12

#: The target's (and the tokenizer's) training text, by source (:mod:`specbench.zoo.corpus`):
#: each batch of windows is split across sources by these weights; ``chat_docs`` conversations
#: are generated per chat source and split.
CORPUS_MIX: dict[str, Any] = {
    "weights": {"python": 0.3, "funcs": 0.15, "math": 0.4, "prose": 0.15},
    "chat_docs": 2000,
}


def train_config(quick: bool = False) -> dict[str, Any]:
    """Budgets and hyper-parameters (``quick``: a few seconds per model, for CI)."""
    target = {
        # Many small steps: 900 steps of 8 windows loop far less at T=0 than 180 of 16 (issue 34).
        "batch_size": 8,
        "seq_len": 256,
        "tokens": (16 if quick else 900) * 8 * 256,  # ~0.25 s a step on 2 cores
        "lr": 3e-3,
        "weight_decay": 0.1,
        "eval_batches": 2 if quick else 8,
        "mix": CORPUS_MIX,
    }
    drafters: dict[str, Any] = {
        "doc_len": 256,
        "prompt_len": 32,
        # Mostly the target's own greedy continuations (what a drafter meets when
        # serving greedy requests), some real text.
        "self_docs": 8 if quick else 192,
        "real_docs": 8 if quick else 64,
        "gen_batch": 64,
        "ttt_steps": 3,
        "num_depths": 4,
        "block_size": 4,
        "gamma": 4.0,
        "mix": CORPUS_MIX,  # prompts and real documents drawn as the target's are
        # Per drafter: steps (a fixed budget, so the zoo under one cache key is the
        # same on every machine however busy; about 60-100 s each on an idle
        # 2-core machine), learning rate, documents packed per step, anchors per
        # step. Many small steps beat few large ones at these budgets (a probe:
        # DFlash τ 1.65 after 150 s with 4 docs/512 anchors, 1.86 after 100 s with 2/256).
        "per_kind": {
            "eagle3": {"steps": 280, "lr": 3e-3, "docs_per_step": 2, "max_anchors": 512},
            "p-eagle": {"steps": 130, "lr": 3e-3, "docs_per_step": 4, "max_anchors": 512},
            "dflash": {"steps": 540, "lr": 5e-3, "docs_per_step": 2, "max_anchors": 256},
            "dspark": {"steps": 420, "lr": 5e-3, "docs_per_step": 2, "max_anchors": 256},
        },
    }
    if quick:
        for v in drafters["per_kind"].values():
            v["steps"] = QUICK_DRAFTER_STEPS
    return {"target": target, "drafters": drafters}


def train_zoo_target(model, tok, *, seed: int, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    from specbench.zoo.target_training import train_target as _train

    return _train(model, tok, seed=seed, cfg=train_config(quick)["target"], progress=progress)


def train_zoo_drafters(
    drafters: dict, target, tok, *, seed: int, quick: bool = False, progress: bool = True
) -> dict:
    from specbench.zoo.drafter_training import train_drafters as _train

    return _train(drafters, target, tok, seed=seed, cfg=train_config(quick)["drafters"], progress=progress)
