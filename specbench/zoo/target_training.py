"""Train the tiny target LM on the zoo's corpus mix for a fixed token budget.

AdamW with a linear warm-up and cosine decay, random 256-token windows of
the tokenized training split of each source (:mod:`specbench.zoo.corpus`; a
batch of 16 holds each source's share of windows). The budget is in tokens
(not seconds) so that the target is the same on every machine for a seed.
The held-out loss is measured on the standard library's held-out files
(``heldout_loss``, comparable across mixes) and per source on held-out text.
"""

from __future__ import annotations

import math
import time
from typing import Any

from specbench.zoo.progress import bar


def lr_at(frac: float, peak: float, warmup: float = 0.05, floor: float = 0.1) -> float:
    """Warm-up then cosine decay to ``floor * peak``; ``frac`` is progress in [0, 1]."""
    if frac < warmup:
        return peak * max(frac, 1e-3) / warmup
    t = min(1.0, (frac - warmup) / (1 - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def heldout_loss(model, stream, *, batches: int, batch_size: int, seq_len: int, seed: int) -> float:
    import torch

    from specbench.zoo.data import random_windows

    was_training = model.training
    gen = torch.Generator().manual_seed(seed + 12345)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for _ in range(batches):
            x = random_windows(stream, batch_size, seq_len, gen)
            total += float(model(input_ids=x, labels=x).loss)
    model.train(was_training)
    return total / batches


def train_target(model, tok, *, seed: int, cfg: dict[str, Any], progress: bool = True) -> dict[str, Any]:
    """Train ``model`` in place; returns losses, steps and seconds."""
    import torch

    from specbench.zoo.corpus import mixed_windows, streams

    t0 = time.perf_counter()
    mix = cfg["mix"]
    train_streams = streams(tok, mix, "train", seed=seed)
    held_streams = streams(tok, mix, "heldout", seed=seed)
    bs, seq, steps = (
        cfg["batch_size"],
        cfg["seq_len"],
        max(1, cfg["tokens"] // (cfg["batch_size"] * cfg["seq_len"])),
    )
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=cfg["weight_decay"]
    )
    model.train()
    losses = []
    t_train = time.perf_counter()
    with bar(progress) as p:
        task = p.add_task("target", total=steps, status="")
        for step in range(steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step / steps, cfg["lr"])
            x = mixed_windows(train_streams, mix["weights"], bs, seq, gen)
            loss = model(input_ids=x, labels=x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(loss.item())
            p.update(task, advance=1, status=f"loss {losses[-1]:.2f}")
    train_s = time.perf_counter() - t_train
    model.eval()
    held = {
        s: round(heldout_loss(model, ids, batches=cfg["eval_batches"], batch_size=bs, seq_len=seq, seed=seed), 3)
        for s, ids in held_streams.items()
    }
    return {
        "steps": steps,
        "tokens": steps * bs * seq,
        "train_tokens_available": {s: int(ids.numel()) for s, ids in train_streams.items()},
        "train_seconds": round(train_s, 1),
        "seconds": round(time.perf_counter() - t0, 1),
        "final_train_loss": round(sum(losses[-10:]) / len(losses[-10:]), 3),
        "heldout_loss": held["python"],
        "heldout_loss_per_source": held,
    }
