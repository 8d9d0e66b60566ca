"""Does a DFlash drafter use its later block slots? Same weights, two block attentions.

speculators trains DFlash with *non-causal* attention inside each draft
block; vLLM serves causal blocks when the checkpoint's
``sliding_window_non_causal`` flag is false (see
:mod:`specbench.zoo.draft_attention`).
Whether that mismatch costs acceptance depends on the trained weights: in a
one-layer drafter the later slots hold only mask tokens, so they carry no
information about the context, and a drafter may or may not have learned to
put attention on them. This measures it in PyTorch, without vLLM: on
held-out prompts continued greedily by the target, every anchor's block is
drafted with the attention it was trained with and with causal attention,
and both are compared with the target's greedy tokens.

The reference-vs-vLLM cross-check of a flipped checkpoint should flag it
exactly when this shows that the drafts change enough to move τ.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch


@contextlib.contextmanager
def causal_blocks():
    """Make speculators build DFlash masks with causal attention inside each block."""
    import speculators.models.dflash.core as core

    orig = core.create_anchor_block_mask_mod

    def causal(*a, **kw):
        # a window wider than any sequence keeps the base-prefix rule unchanged,
        # and with the non-causal flag off the block becomes causal
        kw["sliding_window"], kw["sliding_window_non_causal"] = 1 << 30, False
        return orig(*a, **kw)

    core.create_anchor_block_mask_mod = causal
    try:
        yield
    finally:
        core.create_anchor_block_mask_mod = orig


@torch.no_grad()
def block_predictions(model, doc: torch.Tensor, aux: torch.Tensor, last: torch.Tensor, seed: int):
    """Drafter argmax and target argmax per (anchor, slot) over one document."""
    from specbench.zoo.proposers import _to_target_ids

    T = doc.shape[0]
    torch.manual_seed(seed)  # the same random anchors under both attentions
    _h, logits, targets, mask, idx = model._backbone_forward(
        aux[None],
        doc[None],
        torch.ones(1, T, dtype=torch.bool),
        last[None],
        torch.zeros(1, T, dtype=torch.long),
        torch.arange(T)[None],
        max_anchors=T,
    )
    b = model.block_size
    draft = _to_target_ids(model, logits[0].argmax(-1)).view(-1, b)
    want = targets[0].argmax(-1)
    want = _to_target_ids(model, want).view(-1, b)
    valid = mask[0].view(-1, b)[:, 1:].all(-1)
    return draft[valid], want[valid], idx.view(-1, b)[valid]


@torch.no_grad()
def heldout_docs(target, tok, n_prompts: int, new_tokens: int) -> dict:
    """Held-out prompts continued greedily by the target, with the target's states."""
    from specbench.zoo.capture import capture_states, greedy_continue
    from specbench.zoo.data import heldout_prompts

    prompts = torch.tensor(heldout_prompts(tok, n=n_prompts))
    docs = torch.cat([prompts, greedy_continue(target, prompts, new_tokens)], dim=1)
    return {"ids": docs, "prompt_len": prompts.shape[1], **capture_states(target, docs)}


def measure_model(model, held: dict) -> dict:
    """Non-causal vs causal block drafts of ``model`` on :func:`heldout_docs` output.

    Returns the anchor count; per attention, each draft slot's agreement with
    the target and ``tau_proxy`` (1 + the mean number of leading slots that
    agree: greedy τ at K = block - 1 if every anchor were a round's anchor);
    ``changed_per_slot`` (fraction of drafts that differ between the two) and
    ``tau_drop`` (non-causal minus causal ``tau_proxy``).
    """
    docs, st, P = held["ids"], held, held["prompt_len"]
    rows: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {"noncausal": [], "causal": []}
    for i in range(docs.shape[0]):
        for name in rows:
            with causal_blocks() if name == "causal" else contextlib.nullcontext():
                d, w, idx = block_predictions(model, docs[i], st["aux"][i], st["last"][i], seed=i)
            keep = idx[:, 0] >= P - 1  # anchors in the greedy continuation (what serving meets)
            rows[name].append((d[keep], w[keep]))
    out: dict = {"anchors": int(sum(d.shape[0] for d, _ in rows["noncausal"]))}
    drafts = {}
    for name, parts in rows.items():
        d = torch.cat([p[0] for p in parts])[:, 1:]
        w = torch.cat([p[1] for p in parts])[:, 1:]
        hit = d == w
        lead = hit.int().cumprod(-1).sum(-1).float()
        out[name] = {
            "slot_agreement": [round(float(x), 3) for x in hit.float().mean(0)],
            "tau_proxy": round(1 + float(lead.mean()), 3),
        }
        drafts[name] = d
    changed = drafts["noncausal"] != drafts["causal"]
    out["changed_per_slot"] = [round(float(x), 3) for x in changed.float().mean(0)]
    out["tau_drop"] = round(out["noncausal"]["tau_proxy"] - out["causal"]["tau_proxy"], 3)
    return out


def measure_checkpoint(target_dir: str | Path, dflash_dir: str | Path, n_prompts: int, new_tokens: int) -> dict:
    """:func:`measure_model` for a saved target and DFlash drafter (loaded as the reference engine does)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specbench.zoo.proposers import load_proposer

    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    model = load_proposer("dflash", str(dflash_dir)).model
    return measure_model(model, heldout_docs(target, tok, n_prompts, new_tokens))
