"""The target's states a drafter consumes, captured with transformers.

* ``aux``: the inputs of layers 1..3 (``output_hidden_states[i]`` is the
  output of layer ``i-1``, which is what vLLM calls aux layer ``i``),
  concatenated → ``[B, L, 3 * hidden]``;
* ``last``: the final *pre-norm* state (a forward hook on ``model.norm``),
  which drafters turn into the target's logits with their verifier norm and
  LM head → ``[B, L, hidden]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

AUX_LAYERS = (1, 2, 3)


@torch.no_grad()
def capture_states(
    model, input_ids: torch.Tensor, aux_layers: Sequence[int] = AUX_LAYERS, *, logits: bool = False
) -> dict[str, torch.Tensor]:
    """Run the target once over ``input_ids`` ([B, L]); return ``aux``, ``last`` (and ``logits``)."""
    captured: dict[str, torch.Tensor] = {}
    handle = model.model.norm.register_forward_hook(
        lambda _m, args, _o: captured.__setitem__("last", args[0])
    )
    try:
        out = model(input_ids=input_ids, output_hidden_states=True, logits_to_keep=0 if logits else 1)
    finally:
        handle.remove()
    res = {
        "aux": torch.cat([out.hidden_states[i] for i in aux_layers], dim=-1),
        "last": captured["last"],
    }
    if logits:
        res["logits"] = out.logits
    return res


@torch.no_grad()
def greedy_continue(model, input_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """The target's greedy continuation ([B, max_new_tokens]); EOS does not stop it (like ``ignore_eos``)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    new = [nxt]
    for _ in range(max_new_tokens - 1):
        out = model(input_ids=nxt, past_key_values=cache, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        new.append(nxt)
    return torch.cat(new, dim=1)
