"""The reference-vs-vLLM cross-check catches a train/serve mismatch (real vLLM CPU, no mocks).

The trained zoo's DFlash drafter is served twice by vLLM: as trained
(non-causal draft blocks) and from a copy whose ``sliding_window_non_causal``
flag is flipped, so vLLM serves causal blocks with the same weights. The
reference simulator runs both checkpoints as trained (speculators' attention
does not read the flag without sliding-window layers).

The cross-check must report the flipped copy's served-vs-trained attention
mismatch (a fact of its config) and only for it, and its τ test must agree
with what the flip does to this drafter's drafts, measured independently in
PyTorch with the same weights under both attentions
(:mod:`specbench.zoo.block_attention`): a one-layer DFlash may or may not use
the later (mask-only) slots of its block, so the flip may or may not cost τ.
Uses the trained zoo (cpu-smoke trains it in CI; about 8 minutes on 2 cores
when the cache is empty).
"""

from __future__ import annotations

import json

import pytest

from specbench import api
from specbench.zoo.assets import ensure_assets
from specbench.zoo.block_attention import measure_checkpoint
from specbench.zoo.serve import dflash_served_causal, flip_dflash_attention

N_PROMPTS = 48  # held-out standard-library windows; enough for the intervals to separate

SUITE = """
name: cross-check-dflash
targets:
{targets}
datasets:
  - name: heldout
    kind: jsonl
    path: {data}
sampling:
  temperatures: [0.0]
  max_tokens: 64
load:
  batch_sizes: [8]
"""

TARGET = """  - name: {name}
    model: tiny
    assets: trained
    engine: {engine}
    dtype: float32
    max_model_len: 1024
    hardware: cpu
    chat_template: false
    methods:
      - name: dflash
        method: dflash
        speculator: tiny:dflash
        num_speculative_tokens: 3
      - name: dflash-causal
        method: dflash
        speculator: {flipped}
        num_speculative_tokens: 3
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from transformers import AutoTokenizer

    from specbench.zoo.data import heldout_prompts

    tmp = tmp_path_factory.mktemp("cross-check")
    assets = ensure_assets(train=True)
    flipped = flip_dflash_attention(assets.speculators["dflash"], tmp / "dflash-causal")
    assert dflash_served_causal(flipped) and not dflash_served_causal(assets.speculators["dflash"])
    tok = AutoTokenizer.from_pretrained(assets.target)
    data = tmp / "heldout.jsonl"
    rows = [{"id": f"heldout-{i}", "prompt": tok.decode(p)} for i, p in enumerate(heldout_prompts(tok, n=N_PROMPTS))]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    targets = "".join(
        TARGET.format(name=name, engine=engine, flipped=flipped)
        for name, engine in (("vllm", "vllm-offline"), ("ref", "reference"))
    )
    suite = tmp / "suite.yaml"
    suite.write_text(SUITE.format(targets=targets, data=data))
    run_dir = api.run(suite, out=tmp / "results")
    # The flip's effect measured in PyTorch on the same held-out prompts and greedy continuations.
    effect = measure_checkpoint(assets.target, assets.speculators["dflash"], N_PROMPTS, 64)
    return run_dir, api.load_summary(run_dir), effect


def _rows(s):
    assert all(g.status == "ok" for g in s.groups), [(g.group_id, g.reasons) for g in s.groups]
    xc = s.extra.cross_check
    rows = {r.method: r for r in xc}
    assert len(xc) == 2 and set(rows) == {"dflash", "dflash-causal"}  # paired by checkpoint too
    return rows


def test_served_as_trained_agrees_and_the_flag_follows_the_intervals(run):
    from specbench.stats import significant_change

    _, s, _ = run
    rows = _rows(s)
    ok = rows["dflash"]
    assert ok.config_mismatch is None, ok  # the zoo saves DFlash to be served as trained
    # Served as trained: vLLM reproduces the reference exactly (same greedy chain, same counters).
    assert ok.flag is False, ok
    assert ok.vllm_tau.value == pytest.approx(ok.reference_tau.value, abs=1e-9), ok
    # The reference reads the weights only: both checkpoints simulate identically.
    ref_ok, ref_bad = s.group(ok.reference_group), s.group(rows["dflash-causal"].reference_group)
    assert ref_ok.counters == ref_bad.counters
    for r in rows.values():  # a flag is exactly a significant gap between the two τ
        gap = significant_change(r.reference_tau, r.vllm_tau)
        assert r.flag is gap, r


def test_flipped_dflash_is_reported_and_its_tau_test_matches_the_measured_effect(run):
    run_dir, s, effect = run
    bad = _rows(s)["dflash-causal"]
    # The config fact, whatever the drafter: vLLM serves causal blocks, training used non-causal ones.
    assert bad.config_mismatch and "causal" in bad.config_mismatch, bad
    engines = {e["key"]: e for e in json.loads((run_dir / "manifest.json").read_text())["engines"]}
    served = [e["draft_attention"] for e in engines.values() if e.get("draft_attention")]
    assert sorted(a["served"] for a in served) == ["causal", "non-causal"]
    # The τ test agrees with what the flip does to this drafter's greedy drafts (PyTorch, same weights).
    changed = max(effect["changed_per_slot"])
    gap = bad.reference_tau.value - bad.vllm_tau.value
    # (Other trainings of this drafter lost 0.49, 0, 0 and 0.10 of τ~ to the flip, and one gained 0.13.)
    if abs(effect["tau_drop"]) >= 0.3:
        assert bad.flag is True and gap * effect["tau_drop"] > 0, (bad, effect)
        assert "mismatch" in bad.note
    elif changed <= 0.02:  # the drafter barely uses its later block slots: serving it causal is harmless
        assert bad.flag is False and abs(gap) <= 0.05, (bad, effect)
        assert "τ agrees" in bad.note
    elif bad.flag:  # an effect in between: whether 48 prompts resolve it is the intervals' call
        assert gap * effect["tau_drop"] > 0, (bad, effect)  # flagged in the direction PyTorch measured


def test_report_shows_the_cross_check(run, tmp_path):
    run_dir, s, _ = run
    md = api.report(run_dir, tmp_path)["markdown"].read_text()
    assert "Reference cross-check" in md and "dflash-causal" in md
    assert ("| FLAG: differs |" in md) == any(r.flag for r in _rows(s).values())
    assert "| FLAG: served ≠ trained (τ agrees) |" in md or _rows(s)["dflash-causal"].flag
    assert "Draft served ≠ trained on" in md  # the header names the engine, too
