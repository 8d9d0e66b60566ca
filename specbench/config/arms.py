"""A/B arms: what differs between the two sides of ``specbench ab`` (issue 36), and the suite both run.

An arm is a Python environment with its own vLLM (``python``: an interpreter in which specbench is
importable; default: this one), optionally with engine patches, environment variables of its engine
processes, and overrides of some methods (another speculator checkpoint, another K, other
``speculative_config`` keys). :func:`ab_suite` turns a suite into the one the A/B runs: every target
``T`` twice, as ``T@a`` and ``T@b`` (each with its arm applied), so every engine of the suite exists
once per arm, and the plain analysis of the run reads each arm as a target of its own. ``rounds``
is the cap on rounds (:func:`~specbench.config.plan.round_spans` splits each cell's prompts into
them); the runner stops a group's rounds once it is decided.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from specbench.config.methods import VllmPassthrough
from specbench.config.suite import MethodSpec, Strict, Suite, SuiteError, TargetSpec
from specbench.errors import SpecbenchError

ARM_SEP = "@"
ARMS = ("a", "b")


class MethodOverride(Strict):
    """What an arm changes in one method (by its label): a field given here replaces the suite's;
    ``speculative_config`` keys are merged over the suite's."""

    speculator: str | None = None
    num_speculative_tokens: int | list[int] | None = None
    speculative_config: VllmPassthrough = Field(default_factory=dict)


class Arm(Strict):
    """One side of an A/B comparison."""

    label: str = Field("", description="how reports name the arm (default: its python, or 'this environment')")
    python: str | None = Field(None, description="interpreter of the arm's engines (its own vLLM); default: this one")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables of the arm's engines")
    engine_patches: list[str] = Field(default_factory=list, description="added to each target's engine_patches")
    methods: dict[str, MethodOverride] = Field(default_factory=dict, description="overrides by method label")

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, v: Any) -> Any:
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else v

    def describe(self) -> str:
        if self.label:
            return self.label
        parts = [self.python or "this environment"]
        parts += [f"patch {p}" for p in self.engine_patches]
        parts += [f"{k}={v}" for k, v in sorted(self.env.items())]
        parts += [f"{m} overridden" for m in sorted(self.methods)]
        return ", ".join(parts)


class ArmError(SpecbenchError, ValueError):
    """An arm that cannot be read or applied (exit 2)."""


def load_arm(value: str | Path | None) -> Arm:
    """An arm from the command line: nothing (this environment), a YAML arm file (``.yaml``/``.yml``),
    or a Python interpreter (a path, or a name on PATH)."""
    if value is None or str(value) in ("", "."):
        return Arm()
    text = str(value)
    if text.endswith((".yaml", ".yml")):
        from specbench.config.suite import load_yaml_model

        return load_yaml_model(text, Arm, "arm", "python, env, engine_patches")[0]
    return Arm(python=text)


def base_target(name: str) -> str:
    """The suite's target an arm's target comes from (``tiny@b`` → ``tiny``)."""
    return name.split(ARM_SEP, 1)[0]


def arm_of(name: str) -> str | None:
    """The arm of an A/B run's target (``tiny@b`` → ``b``), None outside an A/B run."""
    return name.split(ARM_SEP, 1)[1] if ARM_SEP in name else None


def _apply(target: TargetSpec, arm_name: str, arm: Arm) -> TargetSpec:
    unknown = sorted(set(arm.methods) - {m.label for m in target.methods})
    if unknown:
        raise ArmError(f"arm {arm_name}: no method {', '.join(map(repr, unknown))} in target {target.name!r} "
                       f"(its methods: {', '.join(m.label for m in target.methods)})")
    methods: list[MethodSpec] = []
    for m in target.methods:
        o = arm.methods.get(m.label)
        if o is not None:
            upd: dict[str, Any] = {k: getattr(o, k) for k in ("speculator", "num_speculative_tokens")
                                   if getattr(o, k) is not None}
            upd["speculative_config"] = {**m.speculative_config, **o.speculative_config}
            m = m.model_copy(update=upd)
        methods.append(m)
    patches = list(dict.fromkeys([*target.engine_patches, *arm.engine_patches]))
    return target.model_copy(update={
        "name": f"{target.name}{ARM_SEP}{arm_name}", "methods": methods, "engine_patches": patches,
        "python": arm.python or target.python, "env": {**target.env, **arm.env},
    })


#: vLLM's default ``gpu_memory_utilization``: the share of a GPU an engine takes when its target does not say.
VLLM_DEFAULT_GPU_SHARE = 0.9


#: vLLM's sleep level between an engine's turns on a GPU: its weights offloaded to CPU memory (copied back
#: on wake-up), its KV cache dropped. Level 2 would drop the weights too and reload them from disk.
SLEEP_LEVEL = 1


def pairs_taking_turns(suite: Suite) -> list[str]:
    """Targets whose engine and its counterpart in the other arm do not fit on one GPU together (each
    takes ``gpu_memory_utilization``, vLLM's default 0.9 when unset; two must sum to at most 1): on a
    GPU they take turns with vLLM's sleep mode (:func:`with_sleep_mode`)."""
    out = []
    for t in suite.targets:
        if t.engine == "reference":
            continue
        share = t.gpu_memory_utilization if t.gpu_memory_utilization is not None else VLLM_DEFAULT_GPU_SHARE
        if 2 * share > 1:
            out.append(t.name)
    return out


def with_sleep_mode(suite: Suite, targets: list[str]) -> Suite:
    """``suite`` with vLLM's sleep mode on for ``targets``' engines (``enable_sleep_mode``; a launched
    server also gets its development endpoints, ``/sleep`` and ``/wake_up``, which vLLM serves only
    with ``VLLM_SERVER_DEV_MODE=1``). The runner then lets an engine and its counterpart take turns:
    one sleeps while the other runs (execution.rounds)."""
    out = []
    for t in suite.targets:
        if t.name in targets:
            env = {**t.env, "VLLM_SERVER_DEV_MODE": "1"} if t.engine == "vllm-server" else t.env
            t = t.model_copy(update={"engine_args": {**t.engine_args, "enable_sleep_mode": True}, "env": env})
        out.append(t)
    return suite.model_copy(update={"targets": out})


def ab_suite(suite: Suite, a: Arm, b: Arm) -> Suite:
    """The suite an A/B comparison runs: each target once per arm (``T@a``, ``T@b``), speed rounds on."""
    bad = [t.name for t in suite.targets if ARM_SEP in t.name]
    if bad:
        raise ArmError(f"target name(s) {bad}: '{ARM_SEP}' is reserved for A/B arms")
    ref = [t.name for t in suite.targets if t.engine == "reference"]
    if ref:
        raise ArmError(f"target(s) {ref}: the reference engine measures no speed; an A/B compares vLLM engines")
    if suite.rounds < 2:
        raise SuiteError([f"{suite.source_path or suite.name}: an A/B run needs rounds: N (N ≥ 2, the cap on "
                          "rounds per group); the suite has rounds: 1"])
    # Both arms' engines start the same way, through an interpreter (engines.interpreter): "this environment"
    # is this interpreter named as such, not multiprocessing's spawn, whose child sets its environment
    # later and sits otherwise beside the other arm's engines (an A/A run saw 8 % between the two paths).
    a, b = (arm if arm.python else arm.model_copy(update={"python": sys.executable}) for arm in (a, b))
    targets = [_apply(t, arm, spec) for t in suite.targets for arm, spec in zip(ARMS, (a, b), strict=True)]
    return suite.model_copy(update={"targets": targets, "name": suite.name})


