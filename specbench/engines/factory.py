"""Engine resolution and construction: an :class:`EngineConfig` becomes paths,
vLLM arguments and environment (:func:`resolve_engine`), then an engine
(:func:`make_engine`). Used by the job runner wherever a job executes, and by
``--dry-run``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specbench.config.methods import VllmPassthrough, get_method
from specbench.config.plan import EngineConfig
from specbench.config.suite import TargetSpec
from specbench.engines.loadgen import LoadProfile
from specbench.engines.protocol import Engine
from specbench.engines.vllm_args import build_engine_kwargs, platform_defaults
from specbench.engines.vllm_offline import VllmOfflineEngine
from specbench.engines.vllm_patches import patch_env
from specbench.results import rundir


class ResolvedEngine(BaseModel):
    """An engine config with its model/speculator paths, vLLM arguments and environment."""

    model_config = ConfigDict(extra="forbid")

    config: EngineConfig
    model_path: str
    speculator_path: str | None
    engine_kwargs: VllmPassthrough
    env: dict[str, str] = Field(default_factory=dict)

    def local_paths(self) -> list[str]:
        """The model/speculator references that are paths on this machine (not hub ids)."""
        refs = {self.model_path, self.speculator_path}
        return sorted(p for p in refs if p is not None and os.path.exists(p))


def uses_zoo(cfg: EngineConfig) -> bool:
    return cfg.target.model == "tiny" or (cfg.method.speculator or "").startswith("tiny:")


def target_model_path(target: TargetSpec, assets_factory: Callable[[], Any] | None = None) -> str:
    """The target's model (and tokenizer) as vLLM loads it: the zoo's directory for ``model: tiny``."""
    if target.model != "tiny":
        return target.model
    from specbench.zoo.assets import ensure_assets_for

    assets = ensure_assets_for(target.assets) if assets_factory is None else assets_factory()
    return zoo_target_path(target, assets.target)


def zoo_target_path(target: TargetSpec, trained: Path) -> str:
    """The directory of the zoo target a ``model: tiny`` target serves: the trained one, or its weight-bound copy."""
    if target.zoo_target == "weight-bound":
        from specbench.zoo.weight_bound import ensure_weight_bound

        return str(ensure_weight_bound(trained))
    return str(trained)


def resolve_engine(cfg: EngineConfig, platform: str, assets_factory: Callable[[], Any] | None = None) -> ResolvedEngine:
    """Turn ``tiny`` / ``tiny:<kind>`` / ``target`` references into paths and
    build the engine's vLLM arguments (with CPU defaults on CPU)."""
    from specbench.zoo.assets import ensure_assets_for, resolve_speculator

    model = cfg.target.model
    spec_ref = cfg.method.speculator
    assets = None
    if uses_zoo(cfg):
        assets = ensure_assets_for(cfg.target.assets) if assets_factory is None else assets_factory()
    model_path = zoo_target_path(cfg.target, assets.target) if model == "tiny" and assets is not None else model
    spec_path: str | None = None
    if spec_ref == "target":
        spec_path = model_path
    elif spec_ref is not None and spec_ref.startswith("tiny:"):
        assert assets is not None
        spec_path = str(resolve_speculator(spec_ref, assets))
    elif spec_ref is not None:
        spec_path = spec_ref
    kwargs = build_engine_kwargs(cfg, model_path, spec_path)
    env = platform_defaults(kwargs, platform)
    if uses_zoo(cfg):
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
    if cfg.target.engine != "reference":
        env.update(patch_env(list(dict.fromkeys([*cfg.target.engine_patches, *cfg.method.engine_patches]))))
        env.update(get_method(cfg.method.method).env_for(platform))
    env.update(cfg.target.env)  # the suite's (an A/B arm's) own, last: it may override a default
    env.update(cfg.method.env)  # and the method's own over the target's
    return ResolvedEngine(config=cfg, model_path=model_path, speculator_path=spec_path, engine_kwargs=kwargs, env=env)


def engine_gpus(cfg: EngineConfig, platform: str) -> int:
    """GPUs one engine holds: tensor × pipeline parallel size on CUDA, none elsewhere
    (an attached server's GPUs belong to someone else; the reference engine runs on CPU)."""
    if platform != "cuda" or cfg.target.base_url is not None or cfg.target.engine == "reference":
        return 0
    pp = int(cfg.target.engine_args.get("pipeline_parallel_size", 1) or 1)
    return cfg.target.tensor_parallel_size * pp


def make_engine(res: ResolvedEngine, run_dir: Path, load: LoadProfile | None = None, *,
                prepare_next: bool = False) -> Engine:
    """The engine for a resolved config; its log goes to ``run_dir/engines/<key>.log``.

    ``prepare_next``: (CPU) another vLLM offline engine with this one's environment starts after
    it (a zygote imports vLLM for it meanwhile and forks it; only the offline engine uses it).

    The reference engine (transformers) runs in a child process like the vLLM
    engines, so a run's own process never loads a model.
    """
    log = rundir.engine_log(run_dir, res.config.key)
    engine = res.config.target.engine
    if engine == "vllm-offline":
        return VllmOfflineEngine(res.config, res.engine_kwargs, log, res.env, prepare_next=prepare_next)
    if engine == "vllm-server":
        from specbench.engines.vllm_server import VllmServerEngine

        return VllmServerEngine(res.config, res.engine_kwargs, log, res.env, base_url=res.config.target.base_url, load=load)
    if engine == "reference":
        from specbench.engines.child import ChildEngine
        from specbench.engines.reference import ReferenceEngine

        return ChildEngine(res.config, log, "specbench.engines.reference:ReferenceEngine",
                           (res.config, res.model_path, res.speculator_path), ReferenceEngine.CAPABILITIES)
    raise ValueError(f"unknown engine {engine!r}")
