"""Suite → Plan: the cells to run and the engines they need (pure).

A *cell* is one (target, method, dataset, temperature, load, repeat). Cells
that share a target and a method configuration share one *engine*.

A load is either a batch size / concurrency (``batch_size``; closed loop) or a
Poisson request rate (``request_rate`` in requests/s; open loop, server
targets only), in which case ``batch_size`` holds the optional cap on
requests in flight (``load.max_concurrency``; 0 = no cap).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from specbench.methods import get_method
from specbench.suite import MethodSpec, Suite, TargetSpec


class EngineConfig(BaseModel):
    """Everything needed to start one engine (the speculator still unresolved)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    target: TargetSpec
    method: MethodSpec
    vllm_method: str | None
    speculative_config: dict[str, Any] | None

    def speculative_config_resolved(self, speculator_path: str | None) -> dict[str, Any] | None:
        if self.speculative_config is None:
            return None
        cfg = dict(self.speculative_config)
        if speculator_path is not None:
            cfg["model"] = speculator_path
        return cfg


class Cell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cell_id: str
    engine_key: str
    target: str
    method: str  # label
    method_kind: str  # registry name
    k: int | None
    dataset: str
    temperature: float
    batch_size: int  # concurrency; for a request-rate cell its cap on requests in flight (0: none)
    repeat: int
    request_rate: float | None = None  # Poisson arrivals (requests/s); None: closed loop at batch_size

    @property
    def group_id(self) -> str:
        """The cell without its repeat index: repeats are pooled per group."""
        return group_id(self.target, self.method, self.dataset, self.temperature, self.batch_size, self.request_rate)

    @property
    def baseline_group_key(self) -> tuple[str, str, float, int, float | None]:
        """Cells compared with each other: same target, dataset, temperature and load."""
        return (self.target, self.dataset, self.temperature, self.batch_size, self.request_rate)

    @property
    def load_label(self) -> str:
        return load_label(self.batch_size, self.request_rate)


def group_id(
    target: str, method: str, dataset: str, temperature: float, batch_size: int, request_rate: float | None = None
) -> str:
    """``…/b4`` for a concurrency (batch size) load, ``…/rate2`` for a request rate."""
    load = f"b{batch_size}" if request_rate is None else f"rate{request_rate:g}"
    return f"{target}/{method}/{dataset}/T{temperature:g}/{load}"


def load_label(batch_size: int, request_rate: float | None = None) -> str:
    """A load for people: ``4`` (batch size / concurrency) or ``2 req/s`` (``≤8 in flight`` when capped)."""
    if request_rate is None:
        return str(batch_size)
    return f"{request_rate:g} req/s" + (f" (≤{batch_size} in flight)" if batch_size > 0 else "")


def plan_loads(suite: Suite) -> list[tuple[int, float | None]]:
    """The suite's loads as ``(batch_size, request_rate)``: concurrency (or batch
    size) loads first, then one per request rate (capped at ``max_concurrency``).

    A suite that lists ``request_rates`` but neither ``concurrency`` nor
    ``batch_sizes`` gets rate loads only (the default batch size 1 is not added).
    """
    load = suite.load
    closed: list[int] = list(load.concurrency or load.batch_sizes)
    rates = list(load.request_rates or [])
    if rates and not load.concurrency and "batch_sizes" not in load.model_fields_set:
        closed = []
    return [(bs, None) for bs in closed] + [(load.max_concurrency or 0, float(r)) for r in rates]


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    suite_name: str
    engines: list[EngineConfig]
    cells: list[Cell]

    def cells_for(self, engine_key: str) -> list[Cell]:
        return [c for c in self.cells if c.engine_key == engine_key]


def engine_key(target: TargetSpec, method: MethodSpec) -> str:
    return f"{target.name}--{method.label}"


def expand(suite: Suite) -> Plan:
    """Every cell of the suite, grouped by engine, in a stable order.

    Within an engine, repeats are the outer loop so that a repeat sees every
    dataset/temperature/load once before the next repeat starts.
    """
    engines: list[EngineConfig] = []
    cells: list[Cell] = []
    loads = plan_loads(suite)
    temperatures = list(suite.sampling.temperatures)
    sampled_t = sampled_equivalence_temperature(suite)
    if sampled_t is not None and sampled_t not in temperatures:
        temperatures.append(sampled_t)
    for t in suite.targets:
        for m in t.methods:
            info = get_method(m.method)
            key = engine_key(t, m)
            spec_cfg = info.speculative_config(m.num_speculative_tokens, m.speculator, m.speculative_config)
            engines.append(
                EngineConfig(key=key, target=t, method=m, vllm_method=info.vllm_method, speculative_config=spec_cfg)
            )
            for r in range(suite.repeats):
                for d in suite.datasets:
                    for temp in temperatures:
                        if t.engine == "reference" and temp == sampled_t and temp != 0:
                            continue  # the reference simulator is greedy-only: no sampled-equivalence cells
                        for bs, rate in loads:
                            gid = group_id(t.name, m.label, d.name, temp, bs, rate)
                            cells.append(
                                Cell(
                                    cell_id=f"{gid}/r{r}",
                                    engine_key=key,
                                    target=t.name,
                                    method=m.label,
                                    method_kind=m.method,
                                    k=m.num_speculative_tokens,
                                    dataset=d.name,
                                    temperature=temp,
                                    batch_size=bs,
                                    repeat=r,
                                    request_rate=rate,
                                )
                            )
    return Plan(suite_name=suite.name, engines=engines, cells=cells)


def sampled_equivalence_temperature(suite: Suite) -> float | None:
    """The temperature of the suite's sampled equivalence test, if it asks for one."""
    sampled = suite.equivalence.get("sampled")
    if not sampled:
        return None
    return float(sampled.get("temperature", 1.0)) if isinstance(sampled, dict) else 1.0


def vllm_serve_command(cfg: EngineConfig, engine_kwargs: dict[str, Any]) -> str:
    """The equivalent ``vllm serve`` command line for an engine (for --dry-run)."""
    parts = ["vllm", "serve", str(engine_kwargs.get("model", cfg.target.model))]
    for k, v in engine_kwargs.items():
        if k in ("model", "speculative_config"):
            continue
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            if v:
                parts.append(flag)
        elif isinstance(v, dict):
            parts += [flag, "'" + json.dumps(v) + "'"]
        else:
            parts += [flag, str(v)]
    spec = engine_kwargs.get("speculative_config")
    if spec is not None:
        parts += ["--speculative-config", "'" + json.dumps(spec, sort_keys=True) + "'"]
    return " ".join(parts)
