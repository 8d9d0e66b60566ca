"""How each drafter proposes K tokens at an anchor, outside vLLM (greedy).

A proposer sees only what a serving engine would know at a round's anchor
``n`` (the index of the last token the target emitted, the "bonus" token):
the token ids ``ids[:, : n + 1]`` and the target's states for the tokens it
has already processed, ``aux[:, : n]`` (the bonus token has not been through
the target yet). It returns K draft tokens for positions ``n+1 … n+K`` and
the number of drafter forward passes it took.

* EAGLE-3: K sequential passes; pass 0 runs over every (token ``t+1``,
  target state ``t``) pair, later passes feed back the drafter's own last
  hidden state and draft token through a KV cache (as vLLM does).
* P-EAGLE: one pass over the same pairs plus K-1 (mask token, learned mask
  hidden) slots.
* DFlash / DSpark: one pass of the anchored block ``[x_n, mask, …]`` over
  the target-state context (speculators' ``_backbone_forward``); DSpark then
  decodes the block left to right adding its Markov bias
  (``markov_head.block_bias``) from its own previous token, and can stop
  early on its confidence head (``confidence_threshold``).
* draft_model: a causal LM decoding K tokens greedily (K passes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Proposal:
    tokens: list[int]
    forward_passes: int
    confidences: list[float] = field(default_factory=list)


def _causal_mask(q: int, kv: int, dtype: torch.dtype) -> torch.Tensor:
    """Float mask ``[1, 1, q, kv]``: query ``i`` sees keys ``<= kv - q + i``."""
    m = torch.full((q, kv), float("-inf"), dtype=dtype)
    m = torch.triu(m, diagonal=kv - q + 1)
    return m[None, None]


def _prep_hidden(model, hid: torch.Tensor) -> torch.Tensor:
    """EAGLE-3's optional input norms, then ``fc`` (3·H → H)."""
    if getattr(model, "input_norm", None) is not None:
        hid = model.input_norm(hid)
    if getattr(model, "fc_norm", None) is not None:
        chunks = hid.chunk(len(model.fc_norm), dim=-1)
        hid = torch.cat([n(c) for n, c in zip(model.fc_norm, chunks, strict=True)], dim=-1)
    return model.fc(hid)


def _eagle_logits(model, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, hidden fed back to the next step), following ``norm_output``."""
    if model.config.norm_output:
        h = model.norm(h)
        return model.lm_head(h), h
    return model.lm_head(model.norm(h)), h


def _to_target_ids(model, draft_ids: torch.Tensor) -> torch.Tensor:
    d2t = getattr(model, "d2t", None)
    if d2t is not None and getattr(model, "use_draft_vocab", False):
        return draft_ids + d2t[draft_ids]
    return draft_ids


class Eagle3Proposer:
    method = "eagle3"

    def __init__(self, model):
        self.model = model.eval()

    @torch.no_grad()
    def propose(self, ids: torch.Tensor, aux: torch.Tensor, k: int) -> Proposal:
        from transformers import DynamicCache

        m = self.model
        n = aux.shape[1]
        tok = ids[:, 1 : n + 1]  # token t+1 pairs with the target state of t
        h = _prep_hidden(m, aux)
        pos = torch.arange(1, n + 1).unsqueeze(0)
        cache = DynamicCache()
        start = 0
        out: list[int] = []
        for _ in range(k):
            x = torch.cat([m.embed_tokens(tok).to(h.dtype), h], dim=-1)
            rope = m.rotary_emb(x, pos)
            q = x.shape[1]
            mask = _causal_mask(q, start + q, x.dtype) if q > 1 else None
            cache_pos = torch.arange(start, start + q)
            for layer in m.layers:
                x = layer(
                    x,
                    attention_mask=mask,
                    position_ids=pos,
                    past_key_values=cache,
                    cache_position=cache_pos,
                    position_embeddings=rope,
                )
            logits, fb = _eagle_logits(m, x[:, -1:])
            nxt = _to_target_ids(m, logits.argmax(-1))  # [1, 1]
            out.append(int(nxt))
            start += q
            tok, h, pos = nxt, fb, pos[:, -1:] + 1
        return Proposal(out, forward_passes=k)


class PEagleProposer:
    method = "p-eagle"

    def __init__(self, model):
        self.model = model.eval()

    @torch.no_grad()
    def propose(self, ids: torch.Tensor, aux: torch.Tensor, k: int) -> Proposal:
        m = self.model
        n = aux.shape[1]
        mask_id = m.config.mask_token_id
        tok = torch.cat([ids[:, 1 : n + 1], torch.full((1, k - 1), mask_id, dtype=ids.dtype)], dim=1)
        hid = torch.cat([aux, m.mask_hidden.to(aux.dtype).expand(1, k - 1, -1)], dim=1)
        h = _prep_hidden(m, hid)
        x = torch.cat([m.embed_tokens(tok).to(h.dtype), h], dim=-1)
        pos = torch.arange(1, n + k).unsqueeze(0)
        rope = m.rotary_emb(x, pos)
        mask = _causal_mask(x.shape[1], x.shape[1], x.dtype)
        for layer in m.layers:
            x = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope)
        logits = m.lm_head(m.norm(x[:, n - 1 :]))
        return Proposal(_to_target_ids(m, logits.argmax(-1))[0].tolist(), forward_passes=1)


class BlockProposer:
    """DFlash and DSpark: one anchored-block pass (speculators' own backbone)."""

    def __init__(self, model, method: str, confidence_threshold: float | None = None):
        self.model = model.eval()
        self.method = method
        self.block = model.block_size
        self.from_anchor = bool(model.config.sample_from_anchor)
        self.threshold = confidence_threshold
        self.max_k = self.block if self.from_anchor else self.block - 1

    @torch.no_grad()
    def block_logits(self, ids: torch.Tensor, aux: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states and logits ``[block, …]`` of the block anchored at ``n = aux.shape[1]``."""
        m = self.model
        n = aux.shape[1]
        pad = self.block + 1  # select_anchors never picks the last block_size positions
        T = n + pad
        hid = torch.cat([aux, aux.new_zeros(1, pad, aux.shape[2])], dim=1)
        tok = torch.cat([ids[:, : n + 1], ids.new_zeros(1, pad - 1)], dim=1)
        loss_mask = torch.zeros(1, T, dtype=torch.bool)
        loss_mask[0, n] = True
        doc = torch.zeros(1, T, dtype=torch.long)
        doc[0, n + 1 :] = -1
        last = aux.new_zeros(1, T, m.config.transformer_layer_config.hidden_size)
        hidden, logits, _t, _m, _idx = m._backbone_forward(
            hid, tok, loss_mask, last, doc, torch.arange(T).unsqueeze(0), max_anchors=1
        )
        return hidden[0], logits[0]

    def _prev_tokens(self, anchor: int, drafts: list[int]) -> torch.Tensor:
        """Each block slot's previous token (``[1, block]``), as in DSpark's training ``forward``.

        Block position ``j`` holds the token at ``n + j`` (the anchor, then the
        drafts so far; later slots are padding that no earlier slot depends on).
        """
        toks = ([anchor, *drafts] + [anchor] * self.block)[: self.block]
        prev = toks if self.from_anchor else [toks[0], *toks[:-1]]
        return torch.tensor([prev])

    @torch.no_grad()
    def propose(self, ids: torch.Tensor, aux: torch.Tensor, k: int) -> Proposal:
        if k > self.max_k:
            raise ValueError(f"{self.method} with block_size {self.block} drafts at most {self.max_k} tokens")
        m = self.model
        hidden, logits = self.block_logits(ids, aux)
        slots = list(range(k)) if self.from_anchor else list(range(1, k + 1))
        markov = getattr(m, "markov_head", None)
        conf_head = getattr(m, "confidence_head", None)
        anchor = int(ids[0, aux.shape[1]])
        out: list[int] = []
        confs: list[float] = []
        survival = 1.0
        for s in slots:
            lg = logits[s]
            prev = self._prev_tokens(anchor, out)
            prev_emb = None
            if markov is not None:
                # Slot s is biased by the token before it in the block: the drafter's own previous draft.
                prev_emb = markov.prev_embeddings(prev)
                lg = (
                    lg
                    + markov.block_bias(prev_token_ids=prev, hidden_states=hidden[None], prev_emb=prev_emb)[
                        0, s
                    ]
                )
            tok = int(_to_target_ids(m, lg.argmax(-1, keepdim=True)))
            if conf_head is not None:
                feat = hidden[s]
                if m.config.confidence_head_with_markov and prev_emb is not None:
                    feat = torch.cat([feat, prev_emb[0, s].to(feat.dtype)], dim=-1)
                c = float(torch.sigmoid(conf_head(feat[None, None]))[0, 0])
                confs.append(c)
                survival *= c
                if self.threshold is not None and out and survival < self.threshold:
                    break
            out.append(tok)
        return Proposal(out, forward_passes=1, confidences=confs)


class DraftModelProposer:
    """A causal LM drafting greedily, K passes (the first over the whole prefix)."""

    method = "draft_model"

    def __init__(self, model):
        self.model = model.eval()

    @torch.no_grad()
    def propose(self, ids: torch.Tensor, aux: torch.Tensor | None, k: int) -> Proposal:
        from transformers import DynamicCache

        cache = DynamicCache()
        x = ids
        out: list[int] = []
        for _ in range(k):
            logits = self.model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
            x = logits[:, -1].argmax(-1, keepdim=True)
            out.append(int(x))
        return Proposal(out, forward_passes=k)


def load_proposer(method: str, path: str, spec_config: dict[str, Any] | None = None, target=None):
    """The proposer for a method and checkpoint (``target``: reuse for self-drafting)."""
    spec_config = spec_config or {}
    if method == "draft_model":
        if target is not None:
            return DraftModelProposer(target)
        from transformers import AutoModelForCausalLM

        return DraftModelProposer(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32))
    from speculators.model import SpeculatorModel

    from specbench.zoo.progress import quiet_speculators

    with quiet_speculators():
        model = SpeculatorModel.from_pretrained(path).float()
    _force_eager(model)
    algo = model.config.speculators_config.algorithm
    if method == "eagle3" and not spec_config.get("parallel_drafting"):
        _expect(algo, ("eagle3",), method)
        return Eagle3Proposer(model)
    if method in ("p-eagle", "eagle3"):
        _expect(algo, ("peagle",), method)
        return PEagleProposer(model)
    if method in ("dflash", "dspark"):
        _expect(algo, (method,), method)
        return BlockProposer(model, method, spec_config.get("confidence_threshold"))
    raise ValueError(f"the reference cannot simulate method {method!r}")


def _expect(algo: str, ok: tuple[str, ...], method: str) -> None:
    if algo not in ok:
        raise ValueError(f"method {method!r} needs a {'/'.join(ok)} checkpoint, got a {algo!r} one")


def _force_eager(model) -> None:
    """Eager attention on CPU (a loaded config may default to flex attention)."""
    tl = model.config.transformer_layer_config
    tl._attn_implementation = "eager"
    for mod in model.modules():
        cfg = getattr(mod, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation") and cfg is not model.config:
            cfg._attn_implementation = "eager"
    if hasattr(model, "_attn_impl"):
        model._attn_impl = "eager"
        model._create_mask_fn = broadcast_float_mask


def broadcast_float_mask(
    mask_mod, B: int | None = None, H: int | None = None, Q_LEN: int = 0, KV_LEN: int = 0,  # noqa: N803
    device: torch.device | str | None = None, dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """speculators' ``create_float_mask`` (0 where attended, -inf elsewhere, ``[B, H, Q, KV]``), with
    the mask function evaluated once on broadcast index grids instead of through ``torch.vmap``.

    The anchored-block mask functions are elementwise tensor expressions, so both give the same
    mask (``tests/unit/zoo/test_reference_proposers.py`` compares them); vmap's per-call dispatch made
    this mask three quarters of a DFlash/DSpark proposal's time on CPU."""
    q = torch.arange(Q_LEN, device=device).view(-1, 1)
    kv = torch.arange(KV_LEN, device=device).view(1, -1)
    zero = torch.zeros((), dtype=torch.long, device=device)
    allowed = torch.as_tensor(mask_mod(zero, zero, q, kv), device=device).expand(Q_LEN, KV_LEN)
    out = torch.zeros((B or 1, H or 1, Q_LEN, KV_LEN), dtype=dtype, device=device)
    out.masked_fill_(~allowed, float("-inf"))
    return out
