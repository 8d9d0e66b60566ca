"""The reference-vs-vLLM cross-check catches a train/serve mismatch (real vLLM CPU, no mocks).

The trained zoo's DFlash drafter is served twice by vLLM: as trained
(non-causal draft blocks) and from a copy whose ``sliding_window_non_causal``
flag is flipped, so vLLM serves causal blocks with the same weights. The
reference simulator runs both checkpoints as trained (speculators' attention
does not read the flag without sliding-window layers). The cross-check must
flag the flipped copy and only it. Uses the trained zoo (cpu-smoke trains it in
CI; about 10 minutes on 2 cores when the cache is empty).
"""

from __future__ import annotations

import json

import pytest

from specbench import api
from specbench.assets import ensure_assets
from specbench.zoo.serve import dflash_served_causal, flip_dflash_attention

pytestmark = pytest.mark.integration

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
    return run_dir, api.load_summary(run_dir)


def test_flipped_dflash_attention_is_flagged(run):
    _, s = run
    assert all(g.status == "ok" for g in s.groups), [(g.group_id, g.reasons) for g in s.groups]
    xc = s.extra.get("cross_check") or []
    rows = {r["method"]: r for r in xc}
    assert len(xc) == 2 and set(rows) == {"dflash", "dflash-causal"}  # paired by checkpoint too
    ok, bad = rows["dflash"], rows["dflash-causal"]
    # Served as trained: vLLM agrees with the reference.
    assert ok["flag"] is False, ok
    # Served causal: vLLM accepts significantly less than the drafter was trained to.
    assert bad["flag"] is True, bad
    assert bad["vllm_tau"]["ci_high"] < bad["reference_tau"]["ci_low"]
    assert "mismatch" in bad["note"]
    # The reference reads the weights only: both checkpoints simulate identically.
    ref_ok, ref_bad = s.group(ok["reference_group"]), s.group(bad["reference_group"])
    assert ref_ok.counters == ref_bad.counters


def test_report_shows_the_flag(run, tmp_path):
    run_dir, _ = run
    md = api.report(run_dir, tmp_path)["markdown"].read_text()
    assert "Reference cross-check" in md and "FLAG" in md
