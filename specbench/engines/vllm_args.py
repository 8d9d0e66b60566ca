"""vLLM argument translation, the one copy: an engine config becomes ``vllm.LLM``
keyword arguments (:func:`build_engine_kwargs`, :func:`platform_defaults`), its
resolved ``speculative_config`` (:func:`speculative_config`), and the same
arguments as ``vllm serve`` flags (:func:`server_cli_args`, :func:`server_argv`,
:func:`vllm_serve_command`). Used by every engine and by ``--dry-run``. Pure.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from specbench.config.methods import VllmPassthrough
from specbench.config.plan import EngineConfig


def speculative_config(cfg: EngineConfig, speculator_path: str | None) -> VllmPassthrough | None:
    """The plan's ``speculative_config`` with the speculator resolved to ``speculator_path``."""
    if cfg.speculative_config is None:
        return None
    out = dict(cfg.speculative_config)
    if speculator_path is not None:
        out["model"] = speculator_path
    return out


def build_engine_kwargs(cfg: EngineConfig, model_path: str, speculator_path: str | None) -> VllmPassthrough:
    """``vllm.LLM`` keyword arguments for an engine config."""
    t = cfg.target
    kwargs: VllmPassthrough = {
        "model": model_path,
        "tensor_parallel_size": t.tensor_parallel_size,
        "dtype": t.dtype,
        "seed": 0,
        # get_metrics() needs stat logging (the offline LLM disables it by default).
        "disable_log_stats": False,
    }
    if t.max_model_len is not None:
        kwargs["max_model_len"] = t.max_model_len
    if t.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = t.gpu_memory_utilization
    spec = speculative_config(cfg, speculator_path)
    if spec is not None:
        kwargs["speculative_config"] = spec
        kwargs["per_request_spec_decode_metrics"] = "detailed"
    kwargs.update(t.engine_args)
    return kwargs


def platform_defaults(kwargs: VllmPassthrough, platform: str) -> dict[str, str]:
    """Apply ``platform``'s defaults to ``kwargs`` (in place) and return the environment it needs."""
    env: dict[str, str] = {}
    if platform == "cpu":
        kwargs.setdefault("enforce_eager", True)
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
        # One process per engine: a killed engine leaves no EngineCore orphan.
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # Eager as the model already is: with enforce_eager the only torch.compile left on CPU is the
        # logprob rank count (an integer comparison sum, the same eagerly), which dynamo traces anew in
        # every engine process (~2.5 s of its first request with logprobs).
        env["TORCHDYNAMO_DISABLE"] = os.environ.get("TORCHDYNAMO_DISABLE", "1")
    return env


def num_speculative_tokens(kwargs: VllmPassthrough) -> int | None:
    """K as the engine's arguments set it (None without speculation)."""
    spec = kwargs.get("speculative_config") or {}
    return spec.get("num_speculative_tokens")


def draft_weights_mib(kwargs: VllmPassthrough) -> float | None:
    """The drafter checkpoint's weight files in MiB (``*.safetensors``, else ``*.bin``) when the engine's
    speculative model is a local directory; None for a drafter without a model (n-gram) or a hub id."""
    model = (kwargs.get("speculative_config") or {}).get("model")
    if not model or not os.path.isdir(model):
        return None
    files = [f for f in os.listdir(model) if f.endswith(".safetensors")] or [
        f for f in os.listdir(model) if f.endswith(".bin")]
    return sum(os.path.getsize(os.path.join(model, f)) for f in files) / 2**20 if files else None


# vLLM server options that are plain ``store_true`` (no ``--no-…`` form); every
# other boolean of ``vllm serve`` (0.32) is a BooleanOptionalAction.
STORE_TRUE_FLAGS = frozenset(
    {
        "disable_log_stats",
        "headless",
        "grpc",
        "data_parallel_multi_port_external_lb",
        "aggregate_engine_logging",
    }
)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def server_cli_args(server_args: VllmPassthrough) -> list[str]:
    """``vllm.LLM`` keyword arguments (as ``build_engine_kwargs`` makes them) → server flags.

    The one kwargs → ``vllm serve`` translation (the launcher and ``--dry-run``).
    ``model`` becomes ``--model``; dicts and lists are passed as JSON; ``None``
    is omitted; ``True`` → ``--flag``; ``False`` → ``--no-flag`` (omitted for
    the few ``store_true`` options, whose default is already off).
    """
    out: list[str] = []
    for key, value in server_args.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                out.append(flag)
            elif key not in STORE_TRUE_FLAGS:
                out.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, dict | list):
            out += [flag, json.dumps(value, sort_keys=True)]
        else:
            out += [flag, str(value)]
    return out


def server_argv(engine_kwargs: VllmPassthrough, python: str = sys.executable) -> list[str]:
    """The server command specbench launches for an engine (without ``--host``/``--port``).

    The engine's ``vllm.LLM`` kwargs plus two server-only defaults: per-request
    spec-decode metrics when speculating, no uvicorn access log. The module
    form, because the ``vllm`` console script of the CPU build does not run.
    """
    args = dict(engine_kwargs)
    if args.get("speculative_config") is not None:
        args.setdefault("per_request_spec_decode_metrics", "detailed")
    args.setdefault("disable_uvicorn_access_log", True)
    return [python, "-m", SERVER_MODULE, *server_cli_args(args)]


def vllm_serve_command(
    cfg: EngineConfig, engine_kwargs: VllmPassthrough, platform: str = "cpu", env: dict[str, str] | None = None
) -> str:
    """The shell line that serves an engine on ``platform`` (for --dry-run): exactly what is launched.

    On cpu that is ``python -m vllm.entrypoints.openai.api_server …`` (the CPU
    build's ``vllm`` script is broken); elsewhere ``vllm serve MODEL …`` with
    the same flags. ``env`` (the engine's variables) prefixes the line.
    """
    kwargs = {"model": cfg.target.model, **engine_kwargs}
    argv = server_argv(kwargs)
    if platform != "cpu":
        flags = argv[3:]
        i = flags.index("--model")
        argv = ["vllm", "serve", flags[i + 1], *flags[:i], *flags[i + 2:]]
    return shlex.join([f"{k}={v}" for k, v in (env or {}).items()] + argv)
