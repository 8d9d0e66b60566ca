"""What a suite asks of early stopping and what a stopped cell records (plain data).

The statistics behind them are in :mod:`specbench.analysis.sequential`.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Metric = Literal["tau", "speedup", "accuracy", "tpot"]
METRICS: tuple[Metric, ...] = ("tau", "speedup", "accuracy", "tpot")


class StopRule(BaseModel):
    """When a cell may stop: once the confidence sequence of ``metric`` is this tight.

    The target is met when the half-width (``(hi - lo) / 2``) is at most
    ``abs_half_width`` or at most ``rel_half_width`` × |estimate| (either,
    when both are given). Checks happen at ``min_prompts``, then every
    ``check_every`` prompts (:func:`check_points`); a cell also stops at
    ``max_prompts`` or when its prompts run out.
    """

    model_config = ConfigDict(extra="forbid")

    metric: Metric
    rel_half_width: float | None = Field(None, gt=0, description="target half-width relative to |estimate|")
    abs_half_width: float | None = Field(None, gt=0, description="target half-width in the metric's units")
    min_prompts: int = Field(32, ge=2, description="no check before this many prompts")
    max_prompts: int | None = Field(None, ge=1, description="stop here whatever the interval (default: all)")
    check_every: int = Field(32, ge=1, description="prompts between checks after min_prompts")
    alpha: float = Field(0.05, gt=0, lt=1, description="1 - coverage of the confidence sequence")
    planned_prompts: int | None = Field(
        None, ge=1, description="n at which the sequence is tightest (default: half the prompts available)"
    )

    @model_validator(mode="after")
    def _target(self) -> StopRule:
        if self.rel_half_width is None and self.abs_half_width is None:
            raise ValueError("a stop rule needs rel_half_width or abs_half_width")
        if self.max_prompts is not None and self.max_prompts < self.min_prompts:
            raise ValueError("max_prompts must be >= min_prompts")
        return self

    def target_half_width(self, estimate: float) -> float:
        """The half-width that satisfies the rule at this estimate."""
        targets = []
        if self.abs_half_width is not None:
            targets.append(self.abs_half_width)
        if self.rel_half_width is not None and math.isfinite(estimate):
            targets.append(self.rel_half_width * abs(estimate))
        return max(targets) if targets else 0.0

    def planned(self, n_available: int | None) -> int:
        """The n that ρ is tuned for."""
        if self.planned_prompts is not None:
            return self.planned_prompts
        caps = [x for x in (self.max_prompts, n_available) if x is not None]
        cap = min(caps) if caps else 4 * self.min_prompts
        return max(self.min_prompts, cap // 2)


class StopRecord(BaseModel):
    """What a cell that ran under a :class:`StopRule` records about its stop (one per rule)."""

    model_config = ConfigDict(extra="forbid")

    rule: StopRule
    order_seed: int = Field(description="seed of seeded_order: the prompts ran in this order")
    n_used: int = Field(description="prompts run (a prefix of the seeded order)")
    n_available: int
    reason: str = Field(description="target | max_prompts | exhausted")
    estimate: float | None
    lo: float | None
    hi: float | None
    half_width: float | None
    target_half_width: float | None
    interval: str = Field(description="asymptotic-cs (τ, TPOT, speedup) or betting-cs (accuracy)")
    stopped_with: list[str] = Field(default_factory=list, description="cells that stopped at the same n (paired)")
    checks: list[tuple[int, float | None, float | None]] = Field(
        default_factory=list, description="(n, lo, hi) at every check, for the report's trace"
    )
