"""The drafter's share of a step (pure; issue 52): decoding steps timed by phase inside vLLM's model runner.

An engine with the ``step-phase-timing`` patch (:mod:`specbench.engines.vllm_patches`) records each step's
phases (:class:`~specbench.results.records.StepPhases`). Drafting and verification are each timed, not
derived as a remainder: verification is the target's forward over the step's scheduled tokens (K+1 per
request) with its input preparation, the rejection sampler and the runner's bookkeeping; drafting is the
drafter's proposal for the next step. The step is timed whole as well, so the parts can be checked against
it (``untimed_ms``: what no timer covers). Steps that scheduled a prompt's prefill (more tokens than K+1 per
request) are left out: the table is about decoding. Controls sit beside the drafters in the same table: no
speculation (a step with no drafter) and n-gram (verification of K+1 tokens with a drafter that runs no model).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from specbench.results.records import CellRecord, StepPhases
from specbench.results.step_share import StepShare
from specbench.stats import Estimate, mean_ci, ratio_ci

MS = 1000.0


def only_decoding(phases: StepPhases, k: int | None) -> np.ndarray:
    """The steps that only decoded: at most K+1 scheduled tokens per request (one without speculation)."""
    per = 1 + (k or 0)
    return np.array([t <= per * max(r, 1) for t, r in zip(phases.tokens, phases.requests, strict=True)], bool)


def _ms(values: np.ndarray) -> Estimate:
    return mean_ci(MS * values)


def step_share(group_id: str, target: str, dataset: str, temperature: float, method: str, k: int | None,
               batch_size: int, cells: Sequence[CellRecord], *, engine_step_s: Estimate | None = None,
               draft_weights_mib: float | None = None, kv_cache_tokens: int | None = None,
               baseline_kv_tokens: int | None = None) -> StepShare | None:
    """One group's row from its cells' timed steps; None when no cell of it was timed."""
    timed = [c.step_phases for c in cells if c.step_phases is not None and c.step_phases.steps]
    if not timed:
        return None
    all_steps = sum(timed[1:], timed[0])
    keep = only_decoding(all_steps, k)
    col = {name: np.asarray(getattr(all_steps, name), float)[keep] for name in
           ("forward_s", "sample_s", "bookkeeping_s", "draft_s", "step_s")}
    verification = col["forward_s"] + col["sample_s"] + col["bookkeeping_s"]
    lost = (1 - kv_cache_tokens / baseline_kv_tokens) if kv_cache_tokens and baseline_kv_tokens else None
    scaled = None if engine_step_s is None or engine_step_s.value is None else engine_step_s.model_copy(update={
        "value": engine_step_s.value * MS,
        "ci_low": None if engine_step_s.ci_low is None else engine_step_s.ci_low * MS,
        "ci_high": None if engine_step_s.ci_high is None else engine_step_s.ci_high * MS})
    return StepShare(
        group_id=group_id, target=target, dataset=dataset, temperature=temperature, method=method, k=k,
        batch_size=batch_size, steps=int(keep.sum()),
        prefill_steps=int((~keep).sum()), forward_ms=_ms(col["forward_s"]), sample_ms=_ms(col["sample_s"]),
        bookkeeping_ms=_ms(col["bookkeeping_s"]), verification_ms=_ms(verification), draft_ms=_ms(col["draft_s"]),
        step_ms=_ms(col["step_s"]), untimed_ms=_ms(col["step_s"] - verification - col["draft_s"]),
        draft_share=ratio_ci(col["draft_s"], col["step_s"]), engine_step_ms=scaled,
        draft_weights_mib=draft_weights_mib, kv_cache_tokens=kv_cache_tokens, kv_tokens_lost=lost)


def step_shares(groups: Sequence, cells_of: Mapping[str, Sequence[CellRecord]],
                engine_facts: Mapping[str, tuple[float | None, int | None]]) -> list[StepShare]:
    """Every timed group's row (``groups``: the run's GroupSummary list; ``cells_of``: group id → its latest
    cell records; ``engine_facts``: engine key → (drafter weight MiB, KV cache tokens))."""
    def facts(gid: str) -> tuple[float | None, int | None]:
        keys = {c.engine_key for c in cells_of.get(gid, ())}
        return engine_facts.get(next(iter(sorted(keys)), ""), (None, None)) if keys else (None, None)

    baseline_kv = {g.target: facts(g.group_id)[1] for g in groups if g.method_kind == "baseline"}
    out = []
    for g in groups:
        mib, kv = facts(g.group_id)
        row = step_share(g.group_id, g.target, g.dataset, g.temperature, g.method, g.k, g.batch_size,
                         cells_of.get(g.group_id, ()),
                         engine_step_s=g.step_time_s, draft_weights_mib=mib, kv_cache_tokens=kv,
                         baseline_kv_tokens=baseline_kv.get(g.target))
        if row is not None:
            out.append(row)
    return out
