"""Tiny local assets for CPU runs: a tokenizer, a Qwen3 target and four drafters.

Everything is built without the hub, deterministically from a seed, into a
cache directory (``$SPECBENCH_CACHE`` or ``~/.cache/specbench``) under a
subdirectory keyed by a hash of (asset code version, seed, configuration,
corpus fingerprint, train mode). A build happens in a temporary sibling
directory that is renamed into place only when complete, so an interrupted
build never leaves a half cache; a second call returns the cache at once.

``train=False`` gives randomly initialised (but loadable) models in seconds;
``train=True`` trains the target and every drafter with :mod:`specbench.zoo`
(minutes; ``quick=True`` trains a few seconds each, for CI).
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbench.settings import settings

ASSET_VERSION = "3"  # 3: the tokenizer is trained on the corpus mix

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>", "<|pad|>"]
VOCAB_SIZE = 4096

TARGET_CONFIG: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    # Small enough to see 1.8M training tokens in ~3.5 min on 2 cores: at this budget a smaller
    # target trained on more tokens loops less at T=0 than a wider one on fewer (issue 34;
    # benchmarks/zoo_target_levers.py, docs/measurements.md).
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "tie_word_embeddings": False,
    "max_position_embeddings": 4096,
}

# Shared by every drafter: one layer (unless its kind's ``num_layers`` says otherwise) fed by the
# target's layers 1..3.
DRAFTER_COMMON: dict[str, Any] = {
    "num_layers": 1,
    "target_layer_ids": [1, 2, 3],
    "draft_vocab_size": VOCAB_SIZE,
    "draft_attn_impl": "eager",
}
DRAFTER_KINDS: dict[str, dict[str, Any]] = {
    "eagle3": {"ttt_steps": 3, "norm_before_residual": False},
    "p-eagle": {"num_depths": 4, "norm_before_residual": False},
    "dflash": {"block_size": 4},
    "dspark": {"block_size": 4, "markov_rank": 16, "enable_confidence_head": True},
}

# ChatML. ``enable_thinking`` (and any other kwarg) is accepted and ignored:
# the tiny target has no thinking mode.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass
class TinyAssets:
    root: Path
    target: Path
    tokenizer: Path
    speculators: dict[str, Path]  # keys: "eagle3", "p-eagle", "dflash", "dspark"
    trained: bool
    info: dict[str, Any] = field(default_factory=dict)


def default_cache_dir() -> Path:
    return settings().cache.expanduser()


def asset_config(*, train: bool, quick: bool) -> dict[str, Any]:
    """Everything that determines the built files (hashed into the cache key)."""
    from specbench.zoo import CORPUS_MIX
    from specbench.zoo.data import corpus_fingerprint

    cfg: dict[str, Any] = {
        "asset_version": ASSET_VERSION,
        "vocab_size": VOCAB_SIZE,
        "special_tokens": SPECIAL_TOKENS,
        "target": TARGET_CONFIG,
        "drafter_common": DRAFTER_COMMON,
        "drafters": DRAFTER_KINDS,
        "chat_template": CHAT_TEMPLATE,
        "corpus": corpus_fingerprint(),
        "corpus_mix": CORPUS_MIX,  # the tokenizer is trained on it, trained or not
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "train": bool(train),
        "quick": bool(quick) if train else False,
    }
    if train:
        from specbench.zoo import TRAIN_VERSION, train_config

        cfg["train_version"] = TRAIN_VERSION
        cfg["train_config"] = train_config(quick=quick)
    return cfg


def cache_key(seed: int, cfg: dict[str, Any]) -> str:
    blob = json.dumps({"seed": seed, **cfg}, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    mode = ("trained-quick" if cfg.get("quick") else "trained") if cfg.get("train") else "init"
    return f"tiny-{mode}-s{seed}-{digest}"


def _layout(root: Path, info: dict[str, Any]) -> TinyAssets:
    return TinyAssets(
        root=root,
        target=root / "target",
        tokenizer=root / "target",  # the tokenizer is saved with the target
        speculators={k: root / "speculators" / k for k in DRAFTER_KINDS},
        trained=bool(info.get("trained", False)),
        info=info,
    )


def ensure_assets(
    cache_dir: Path | None = None,
    *,
    train: bool = False,
    quick: bool = False,
    seed: int = 0,
    progress: bool = True,
) -> TinyAssets:
    """The tiny assets for (seed, train, quick), building them if not cached."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    cfg = asset_config(train=train, quick=quick)
    key = cache_key(seed, cfg)
    final = cache_dir / key
    manifest = final / "manifest.json"
    if manifest.is_file():
        return _layout(final, json.loads(manifest.read_text()))
    # One builder per key; others wait on the lock and then find the cache.
    with open(cache_dir / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if manifest.is_file():
            return _layout(final, json.loads(manifest.read_text()))
        for stale in cache_dir.glob(f".{key}.building-*"):  # a killed build's leftovers
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.building-", dir=cache_dir))
        try:
            info = _quiet_build(tmp, final, cfg, seed=seed, train=train, quick=quick, progress=progress)
            info["key"] = key
            (tmp / "manifest.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str))
            if final.exists():  # a stale, manifest-less directory (should not happen)
                shutil.rmtree(final)
            tmp.chmod(0o755)  # mkdtemp makes it private
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return _layout(final, json.loads(manifest.read_text()))


# A suite target's ``assets:`` (see specbench.config.suite.TargetSpec) → ensure_assets arguments.
ASSET_MODES: dict[str, dict[str, bool]] = {
    "trained": {"train": True, "quick": False},
    "quick": {"train": True, "quick": True},
    "untrained": {"train": False, "quick": False},
}


def ensure_assets_for(mode: str | None, cache_dir: Path | None = None, **kw: Any) -> TinyAssets:
    """The assets a suite target asks for: ``mode`` is ``trained``, ``quick`` or
    ``untrained`` (None: untrained). Training happens here, once, on first use."""
    mode = mode or "untrained"
    if mode not in ASSET_MODES:
        raise ValueError(f"unknown assets mode {mode!r}; valid: {', '.join(ASSET_MODES)}")
    return ensure_assets(cache_dir, **ASSET_MODES[mode], **kw)


def resolve_speculator(ref: str, assets: TinyAssets) -> Path:
    """``"tiny:<kind>"`` → the drafter's checkpoint directory."""
    kinds = ", ".join(sorted(assets.speculators))
    if not ref.startswith("tiny:"):
        raise ValueError(
            f"not a tiny speculator reference: {ref!r} (expected 'tiny:<kind>', kind one of {kinds})"
        )
    kind = ref[len("tiny:") :]
    if kind not in assets.speculators:
        raise ValueError(f"unknown tiny speculator {kind!r}; valid kinds: {kinds}")
    return assets.speculators[kind]


# --------------------------------------------------------------------------
# building


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"[specbench.zoo.assets] {msg}", file=sys.stderr, flush=True)


def _quiet_build(tmp: Path, final: Path, cfg: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """:func:`_build` with speculators' per-file loader logging switched off."""
    from specbench.zoo.progress import quiet_speculators

    with quiet_speculators():
        return _build(tmp, final, cfg, **kw)


def _build(
    tmp: Path, final: Path, cfg: dict[str, Any], *, seed: int, train: bool, quick: bool, progress: bool
) -> dict[str, Any]:
    import torch

    t0 = time.perf_counter()
    info: dict[str, Any] = {"seed": seed, "trained": train, "quick": quick if train else False, "config": cfg}
    target_dir = tmp / "target"
    _say(progress, f"building tokenizer → {final}")
    tok = build_tokenizer(target_dir)
    info["tokenizer_seconds"] = round(time.perf_counter() - t0, 2)
    torch.manual_seed(seed)
    model = build_target(tok)
    if train:
        from specbench.zoo import train_zoo_target

        info["target_training"] = train_zoo_target(model, tok, seed=seed, quick=quick, progress=progress)
    _save_target(model, target_dir)
    spec_dir = tmp / "speculators"
    drafters = {}
    for i, kind in enumerate(DRAFTER_KINDS):
        torch.manual_seed(seed * 1000 + i + 1)
        drafters[kind] = build_drafter(kind, target_dir, mask_token_id=tok.convert_tokens_to_ids("<|mask|>"))
    if train:
        from specbench.zoo import train_zoo_drafters

        info["drafter_training"] = train_zoo_drafters(
            drafters, model, tok, seed=seed, quick=quick, progress=progress
        )
    for kind, drafter in drafters.items():
        save_drafter(drafter, spec_dir / kind, kind=kind, tmp_target=target_dir, final_target=final / "target")
    info["sizes_mb"] = {
        "target": _size_mb(target_dir),
        **{k: _size_mb(spec_dir / k) for k in DRAFTER_KINDS},
    }
    info["seconds"] = round(time.perf_counter() - t0, 2)
    _say(progress, f"built in {info['seconds']} s")
    return info


def _size_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*.safetensors")) / 1e6, 2)


def build_tokenizer(out_dir: Path, mix: dict[str, Any] | None = None):
    """Byte-level BPE (4096 tokens) trained on the training split of the corpus ``mix``
    (:mod:`specbench.zoo.corpus`; default: the zoo's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from specbench.zoo.corpus import training_texts

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    from specbench.zoo import CORPUS_MIX

    bpe.train_from_iterator(training_texts(CORPUS_MIX if mix is None else mix), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        mask_token="<|mask|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=TARGET_CONFIG["max_position_embeddings"],
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(out_dir)
    return tok


def target_config(tok):
    from transformers import Qwen3Config

    return Qwen3Config(
        **TARGET_CONFIG,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|pad|>"),
        dtype="float32",
    )


def build_target(tok):
    """A freshly initialised tiny Qwen3 (seed it with ``torch.manual_seed`` first)."""
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM(target_config(tok)).float()


def _save_target(model, out_dir: Path) -> None:
    model.config.dtype = "float32"
    model.save_pretrained(out_dir, safe_serialization=True)


def drafter_class(kind: str):
    from speculators.models import DFlashDraftModel, DSparkDraftModel, Eagle3DraftModel, PEagleDraftModel

    return {
        "eagle3": Eagle3DraftModel,
        "p-eagle": PEagleDraftModel,
        "dflash": DFlashDraftModel,
        "dspark": DSparkDraftModel,
    }[kind]


def drafter_layers(kind: str) -> int:
    """The drafter's depth: its kind's ``num_layers`` in :data:`DRAFTER_KINDS`, else :data:`DRAFTER_COMMON`'s."""
    return int(DRAFTER_KINDS[kind].get("num_layers", DRAFTER_COMMON["num_layers"]))


def build_drafter(kind: str, target_dir: Path, *, mask_token_id: int, num_layers: int | None = None):
    """An untrained drafter of ``kind`` for the target saved at ``target_dir``, :func:`drafter_layers`
    deep unless ``num_layers`` says otherwise (``benchmarks/drafter_depth_probe.py``)."""
    from transformers import AutoConfig

    vcfg = copy.deepcopy(AutoConfig.from_pretrained(target_dir))
    n = drafter_layers(kind) if num_layers is None else num_layers
    vcfg.num_hidden_layers = n
    if getattr(vcfg, "layer_types", None):
        vcfg.layer_types = vcfg.layer_types[:n]  # vLLM validates len(layer_types) == num_hidden_layers
    kwargs = {k: v for k, v in DRAFTER_COMMON.items() if k != "num_layers"}
    kwargs.update({k: v for k, v in DRAFTER_KINDS[kind].items() if k != "num_layers"})
    model = drafter_class(kind).from_training_args(
        vcfg, verifier_name_or_path=str(target_dir), mask_token_id=mask_token_id, **kwargs
    )
    return model.float()


def save_drafter(drafter, out: Path, *, kind: str, tmp_target: Path, final_target: Path) -> None:
    """Save a drafter of ``kind`` built for the target at ``tmp_target`` so that vLLM loads it with the
    target at ``final_target`` (the same path when the target was not built in a temp dir)."""
    drafter.save_pretrained(out)
    _fix_saved_drafter(out, tmp_target=tmp_target, final_target=final_target, kind=kind)


def _fix_saved_drafter(out: Path, *, tmp_target: Path, final_target: Path, kind: str) -> None:
    """Point the saved config at the target's final path (it was built in a temp dir).

    DFlash-family drafters are also made to load in vLLM with the attention
    they were trained with (see :func:`specbench.zoo.serve.serve_config_fixes`).
    """
    cfg_path = out / "config.json"
    text = cfg_path.read_text().replace(str(tmp_target), str(final_target))
    cfg = json.loads(text)
    if kind in ("dflash", "dspark"):
        from specbench.zoo.serve import serve_config_fixes

        serve_config_fixes(cfg)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
