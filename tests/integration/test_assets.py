"""Tiny assets: cache key, idempotence, atomic builds, speculator references."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specbench.zoo.assets import (
    ASSET_MODES,
    DRAFTER_KINDS,
    SPECIAL_TOKENS,
    TinyAssets,
    asset_config,
    cache_key,
    ensure_assets,
    ensure_assets_for,
    resolve_speculator,
)
from specbench.zoo.serve import FLAG, dflash_served_causal, flip_dflash_attention


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, TinyAssets, float]:
    cache = tmp_path_factory.mktemp("cache")
    t0 = time.perf_counter()
    a = ensure_assets(cache, progress=False)
    return cache, a, time.perf_counter() - t0


def test_cache_key_depends_on_seed_and_mode():
    cfg = asset_config(train=False, quick=False)
    assert cache_key(0, cfg) == cache_key(0, asset_config(train=False, quick=False))
    assert cache_key(0, cfg) != cache_key(1, cfg)
    # quick only matters when training
    assert cache_key(0, cfg) == cache_key(0, asset_config(train=False, quick=True))
    assert cache_key(0, {**cfg, "asset_version": "other"}) != cache_key(0, cfg)


def test_layout_and_files(built):
    _, a, _ = built
    assert a.trained is False
    assert set(a.speculators) == set(DRAFTER_KINDS) == {"eagle3", "p-eagle", "dflash", "dspark"}
    assert (a.target / "config.json").is_file() and (a.target / "model.safetensors").is_file()
    assert (a.tokenizer / "tokenizer.json").is_file()
    for kind, p in a.speculators.items():
        cfg = json.loads((p / "config.json").read_text())
        # the verifier points at the final target, not the temporary build dir
        assert cfg["speculators_config"]["verifier"]["name_or_path"] == str(a.target), kind
        assert cfg["transformer_layer_config"]["num_hidden_layers"] == 1
        assert len(cfg["transformer_layer_config"]["layer_types"]) == 1
    assert not list(a.root.parent.glob(".*building*")), "temporary build dirs left behind"


def test_idempotent_and_fast(built):
    cache, a, _ = built
    t0 = time.perf_counter()
    b = ensure_assets(cache, progress=False)
    assert time.perf_counter() - t0 < 2.0
    assert b.root == a.root and b.info == a.info


def test_tokenizer(built):
    from transformers import AutoTokenizer

    _, a, _ = built
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    assert len(tok) == 4096
    for t in SPECIAL_TOKENS:
        assert tok.convert_tokens_to_ids(t) < len(SPECIAL_TOKENS)
    text = "def f(x):\n    return x + 1\n"
    assert tok.decode(tok(text)["input_ids"]) == text
    msgs = [{"role": "user", "content": "hi"}]
    plain = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert (
        tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
        == plain
    )


def test_resolve_speculator(built):
    _, a, _ = built
    assert resolve_speculator("tiny:eagle3", a) == a.speculators["eagle3"]
    assert resolve_speculator("tiny:p-eagle", a) == a.speculators["p-eagle"]
    with pytest.raises(ValueError, match="dflash, dspark, eagle3, p-eagle"):
        resolve_speculator("tiny:medusa", a)
    with pytest.raises(ValueError):
        resolve_speculator("eagle3", a)


def test_dflash_served_non_causal_and_flip(built, tmp_path):
    _, a, _ = built
    src = a.speculators["dflash"]
    assert dflash_served_causal(src) is False
    flipped = flip_dflash_attention(src, tmp_path / "flipped")
    assert dflash_served_causal(flipped) is True
    assert json.loads((flipped / "config.json").read_text())[FLAG] is False
    assert (flipped / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()


def test_seeded_weights_are_deterministic(built, tmp_path):
    from safetensors.torch import load_file

    _, a, _ = built
    b = ensure_assets(tmp_path, progress=False)
    wa, wb = load_file(a.target / "model.safetensors"), load_file(b.target / "model.safetensors")
    assert all((wa[k] == wb[k]).all() for k in wa)
    da = load_file(a.speculators["eagle3"] / "model.safetensors")
    db = load_file(b.speculators["eagle3"] / "model.safetensors")
    assert all((da[k] == db[k]).all() for k in da)


def test_failed_build_leaves_no_cache(tmp_path, monkeypatch):
    import specbench.zoo.assets as assets

    def boom(*a, **k):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(assets, "build_target", boom)
    with pytest.raises(RuntimeError):
        ensure_assets(tmp_path, progress=False, seed=7)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_suite_assets_modes(built):
    """A suite target's ``assets:`` picks the cache entry; untrained is the untrained build."""
    cache, a, _ = built
    assert ensure_assets_for("untrained", cache, progress=False).root == a.root
    assert ensure_assets_for(None, cache, progress=False).root == a.root
    keys = {m: cache_key(0, asset_config(**kw)) for m, kw in ASSET_MODES.items()}
    assert keys["untrained"] == a.root.name
    assert keys["trained"].startswith("tiny-trained-s0-") and keys["quick"].startswith("tiny-trained-quick-s0-")
    assert len(set(keys.values())) == 3
    with pytest.raises(ValueError, match="trained, quick, untrained"):
        ensure_assets_for("random", cache, progress=False)


SUITE = """
name: s
targets:
  - name: t
    model: {model}
{assets}    methods:
      - method: baseline
{extra}datasets:
  - name: d
    kind: humaneval
"""


def _suite(tmp_path: Path, *, model: str = "tiny", assets: str | None = None, extra: str = ""):
    from specbench.config.suite import load_suite

    p = tmp_path / "s.yaml"
    p.write_text(SUITE.format(model=model, assets=f"    assets: {assets}\n" if assets else "", extra=extra))
    return load_suite(p)


def test_suite_assets_default_and_validation(tmp_path):
    from specbench.config.suite import SuiteError

    eagle = "      - method: eagle3\n        speculator: tiny:eagle3\n        num_speculative_tokens: 3\n"
    assert _suite(tmp_path).targets[0].assets == "untrained"  # target only: no training needed
    assert _suite(tmp_path, extra=eagle).targets[0].assets == "trained"  # a tiny drafter: the zoo
    assert _suite(tmp_path, assets="quick", extra=eagle).targets[0].assets == "quick"
    assert _suite(tmp_path, model="Qwen/Qwen3-8B").targets[0].assets is None
    with pytest.raises(SuiteError, match="only applies to model: tiny"):
        _suite(tmp_path, model="Qwen/Qwen3-8B", assets="trained")
    with pytest.raises(SuiteError, match="assets"):
        _suite(tmp_path, assets="half-trained")
    with pytest.raises(SuiteError, match="'zoo_target' only applies to model: tiny"):
        _suite(tmp_path, model="Qwen/Qwen3-8B", extra="    zoo_target: weight-bound\n")


def test_a_weight_bound_target_serves_the_widened_copy(built, tmp_path):
    """``zoo_target: weight-bound`` resolves to the copy beside the zoo's target, built on first use; its drafters
    stay the zoo's."""
    import json

    from specbench.config.plan import expand
    from specbench.engines.factory import resolve_engine
    from specbench.zoo.weight_bound import WEIGHT_BOUND_INTERMEDIATE

    _, a, _ = built
    eagle = "      - method: eagle3\n        speculator: tiny:eagle3\n        num_speculative_tokens: 3\n"
    plan = expand(_suite(tmp_path, extra=eagle + "    zoo_target: weight-bound\n"))
    (eng,) = [e for e in plan.engines if e.method.method == "eagle3"]
    res = resolve_engine(eng, "cpu", assets_factory=lambda: a)
    assert res.model_path != str(a.target) and Path(res.model_path).parent == a.target.parent
    cfg = json.loads((Path(res.model_path) / "config.json").read_text())
    assert cfg["intermediate_size"] == WEIGHT_BOUND_INTERMEDIATE
    assert res.speculator_path == str(a.speculators["eagle3"])
    trained = resolve_engine(expand(_suite(tmp_path, extra=eagle)).engines[1], "cpu", assets_factory=lambda: a)
    assert trained.model_path == str(a.target)


def test_cpu_tour_uses_the_trained_zoo_and_a_greedy_reference_target():
    from specbench.config.plan import expand
    from specbench.config.suite import load_suite

    s = load_suite(Path(__file__).resolve().parents[2] / "suites" / "cpu-tour.yaml")
    assert {t.name: t.assets for t in s.targets} == {"tiny": "trained", "tiny-ref": "trained"}
    ref = next(t for t in s.targets if t.engine == "reference")
    assert {m.method for m in ref.methods} >= {"eagle3", "p-eagle", "dflash", "dspark", "draft_model"}
    cells = expand(s).cells
    assert {c.temperature for c in cells if c.target == ref.name} == {0.0}  # no sampled cells
    assert {c.temperature for c in cells if c.target != ref.name} == {0.0, 0.5}  # greedy + the sampled test


def test_the_main_job_serves_the_weight_bound_target_at_batch_1_and_decides_its_headline():
    """suites/cpu-smoke.yaml (the README's first command): the trained zoo's target carried by its weight-bound copy
    (the GPU's regime, issue 50) at batch 1, every method against EAGLE-3 with headline blocks (issue 51)."""
    from specbench.config.plan import expand
    from specbench.config.suite import load_suite

    s = load_suite(Path(__file__).resolve().parents[2] / "suites" / "cpu-smoke.yaml")
    tiny = next(t for t in s.targets if t.engine != "reference")
    assert tiny.zoo_target == "weight-bound" and s.load.batch_sizes == [1]
    assert {m.method for m in tiny.methods} >= {"baseline", "ngram", "eagle3", "p-eagle", "dflash"}
    assert s.headline is not None and s.headline.instances >= 4 and s.rounds >= 2
    assert {c.temperature for c in expand(s).cells} == {0.0}
