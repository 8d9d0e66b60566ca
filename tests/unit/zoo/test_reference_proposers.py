"""The reference simulator's DFlash/DSpark proposals use speculators' own anchored-block mask, built by
broadcasting (``broadcast_float_mask``) instead of ``torch.vmap`` (``create_float_mask``): the two must
give the same float mask bit for bit, for every shape the simulator and training use."""

from __future__ import annotations

import itertools

import pytest
import torch
from speculators.models.attention import create_float_mask
from speculators.models.dflash.attention import create_anchor_block_mask_mod

from specbench.zoo.proposers import broadcast_float_mask


@pytest.mark.parametrize(("total", "block"), [(5, 2), (17, 4), (60, 4), (131, 8)])
def test_broadcast_mask_equals_speculators_vmap_mask(total: int, block: int) -> None:
    gen = torch.Generator().manual_seed(total)
    doc = torch.zeros(total, dtype=torch.long)
    doc[total // 2:] = 1  # two documents, then padding
    doc[max(1, total - block):] = -1
    for anchors, window, non_causal in itertools.product((1, 3), (None, 2, 8), (False, True)):
        anchor_positions = torch.randint(0, max(1, total - block), (anchors,), generator=gen)
        mod, q_len, kv_len = create_anchor_block_mask_mod(doc, total, anchor_positions, block, window, non_causal)
        want = create_float_mask(mod, None, None, q_len, kv_len, "cpu")
        got = broadcast_float_mask(mod, None, None, q_len, kv_len, "cpu")
        assert got.dtype == want.dtype and got.shape == want.shape == (1, 1, q_len, kv_len)
        assert torch.equal(got, want), (anchors, window, non_causal)
        assert bool((got == 0).any()) and bool(torch.isinf(got).any())  # neither all-attended nor all-masked
