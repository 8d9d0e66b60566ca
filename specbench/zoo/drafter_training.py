"""Train EAGLE-3, P-EAGLE, DFlash and DSpark drafters against the tiny target.

Data: a pool of 256-token documents, part the target's own greedy
continuations of training-split prompts (what a drafter sees when serving
greedy requests), part real training text, both drawn from the target's
corpus mix (:mod:`specbench.zoo.corpus`). The target's states for every
document are captured once (:mod:`specbench.zoo.capture`) and shared by all
drafters. Each step packs a few documents into one sequence with
``document_ids`` (as speculators' trainer does) and calls the drafter's own
training ``forward``, which computes its own objective against the target's
logits (KL via the eager loss implementation: the fused ones need CUDA).

Each drafter trains for a fixed number of steps (``steps``), seeded: the
same data order, initialisation and updates on every machine, so one cache
key names one zoo. (An earlier version budgeted seconds of CPU time; the zoo
then depended on how busy the machine was, and so did properties such as
whether DFlash uses its later block slots.)
"""

from __future__ import annotations

import time
from typing import Any

import torch

from specbench.zoo.progress import bar
from specbench.zoo.target_training import lr_at


def build_pool(target, tok, *, seed: int, cfg: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Documents (``ids`` [N, L]) with the target's ``aux`` and ``last`` states."""
    from specbench.zoo.capture import capture_states, greedy_continue
    from specbench.zoo.corpus import mixed_windows, streams

    gen = torch.Generator().manual_seed(seed + 1)
    mix = cfg["mix"]
    train = streams(tok, mix, "train", seed=seed)
    L, P = cfg["doc_len"], cfg["prompt_len"]
    docs = []
    target.eval()
    for i in range(0, cfg["self_docs"], cfg["gen_batch"]):
        n = min(cfg["gen_batch"], cfg["self_docs"] - i)
        prompts = mixed_windows(train, mix["weights"], n, P, gen)
        docs.append(torch.cat([prompts, greedy_continue(target, prompts, L - P)], dim=1))
    if cfg["real_docs"]:
        docs.append(mixed_windows(train, mix["weights"], cfg["real_docs"], L, gen))
    ids = torch.cat(docs)
    aux, last = [], []
    for chunk in ids.split(8):
        st = capture_states(target, chunk)
        aux.append(st["aux"])
        last.append(st["last"])
    return {"ids": ids, "aux": torch.cat(aux), "last": torch.cat(last)}


def pack(
    pool: dict[str, torch.Tensor], idx: list[int], *, shift: bool, edge: int = 0
) -> dict[str, torch.Tensor]:
    """Pack documents ``idx`` into one ``[1, T]`` training sequence.

    ``shift`` applies EAGLE-3's alignment per document
    (``speculators.models.eagle3.data.shift_batch``: token ``t+1`` with the
    state of ``t``). ``edge`` > 0 zeroes the loss mask where a training
    target would fall into the next document: the first ``edge`` positions of
    each shifted document (EAGLE-3's teacher-forced steps shift targets
    across the packed sequence) or, unshifted, the last ``edge`` positions
    (DFlash blocks must not straddle documents).
    """
    from speculators.models.eagle3.data import shift_batch

    parts = []
    for d, i in enumerate(idx):
        L = pool["ids"].shape[1]
        sample = {
            "input_ids": pool["ids"][i],
            "hidden_states": pool["aux"][i],
            "verifier_last_hidden_states": pool["last"][i],
            "loss_mask": torch.ones(L, dtype=torch.bool),
            "lengths": torch.tensor([L]),
            "position_ids": torch.arange(L),
        }
        if shift:
            sample = shift_batch(sample)
            if edge and d > 0:
                sample["loss_mask"][:edge] = False
        elif edge:
            sample["loss_mask"][-edge:] = False
        n = sample["input_ids"].shape[0]
        sample["document_ids"] = torch.full((n,), d, dtype=torch.long)
        parts.append(sample)
    keys = (
        "input_ids",
        "hidden_states",
        "verifier_last_hidden_states",
        "loss_mask",
        "position_ids",
        "document_ids",
    )
    return {k: torch.cat([p[k] for p in parts]).unsqueeze(0) for k in keys}


def step_kwargs(kind: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The objective's arguments for each drafter's training ``forward``."""
    from speculators.losses import resolve_loss_config

    kl = resolve_loss_config("kl_div", "eager")
    if kind == "eagle3":
        return {"ttt_steps": cfg["ttt_steps"], "ttt_step_loss_decay": 1.0, "loss_config": kl}
    if kind == "p-eagle":
        return {
            "loss_config": kl,
            "num_depths": cfg["num_depths"],
            "max_anchors": cfg["max_anchors"],
            "down_sample_ratio": 0.7,
            "down_sample_ratio_min": 0.2,
        }
    common = {"loss_config": kl, "gamma": cfg["gamma"], "max_anchors": cfg["max_anchors"]}
    if kind == "dflash":
        return common
    if kind == "dspark":
        tv = resolve_loss_config("tv", "eager")["tv"][0]
        return {**common, "tv_loss_fn": tv, "confidence_head_alpha": 1.0}
    raise ValueError(kind)


def train_one(
    kind: str, model, pool: dict[str, torch.Tensor], *, seed: int, cfg: dict[str, Any], p, task
) -> dict:
    """Train one drafter in place for ``cfg["per_kind"][kind]["steps"]``; returns steps and losses."""
    cfg = {**cfg, **cfg["per_kind"][kind]}
    total = max(1, int(cfg["steps"]))
    shift = kind in ("eagle3", "p-eagle")
    edge = (cfg["ttt_steps"] - 1) if kind == "eagle3" else (0 if shift else cfg["block_size"] - 1)
    kwargs = step_kwargs(kind, cfg)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    n_docs = pool["ids"].shape[0]
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(total):
        for g in opt.param_groups:
            g["lr"] = lr_at(step / total, cfg["lr"])
        idx = torch.randint(0, n_docs, (cfg["docs_per_step"],), generator=gen).tolist()
        batch = pack(pool, idx, shift=shift, edge=edge)
        _, loss, _metrics = model(**batch, **kwargs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        p.update(task, completed=step + 1, status=f"loss {losses[-1]:.3f}")
    model.eval()
    tail = losses[-max(1, min(10, len(losses) // 2)) :]  # never the first loss, unless alone
    return {
        "steps": total,
        "seconds": round(time.perf_counter() - t0, 1),
        "first_loss": round(losses[0], 3),
        "final_loss": round(sum(tail) / len(tail), 3),
    }


def train_drafters(
    drafters: dict, target, tok, *, seed: int, cfg: dict[str, Any], progress: bool = True
) -> dict:
    """Train every drafter in ``drafters`` (kind → model) in place."""
    t0 = time.perf_counter()
    pool = build_pool(target, tok, seed=seed, cfg=cfg)
    info: dict[str, Any] = {
        "pool_docs": int(pool["ids"].shape[0]),
        "pool_seconds": round(time.perf_counter() - t0, 1),
    }
    with bar(progress) as p:
        for i, (kind, model) in enumerate(drafters.items()):
            task = p.add_task(kind, total=max(1, int(cfg["per_kind"][kind]["steps"])), status="")
            info[kind] = train_one(
                kind, model, pool, seed=seed * 1000 + 17 * (i + 1), cfg=cfg, p=p, task=task
            )
    info["seconds"] = round(time.perf_counter() - t0, 1)
    return info
