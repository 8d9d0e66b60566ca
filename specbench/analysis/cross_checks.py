"""The summary's checks of the measurements themselves (pure): each group's counters checked for internal
consistency (:func:`counter_checks`: accepted ≤ draft tokens, per-position sum = accepted, 1 ≤ τ ≤ K+1), and the
reference simulator's τ beside vLLM's for the same model, method, K and prompts (:func:`cross_check`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specbench import stats
from specbench.config.suite import TargetSpec
from specbench.results import counters as spec_counters
from specbench.results.parts import CounterCheck, CrossCheckRow
from specbench.results.summary import GroupSummary


def counter_checks(groups: Sequence[GroupSummary]) -> list[CounterCheck]:
    """Internal-consistency checks on every group's counters (see DESIGN.md)."""
    out = []
    for g in groups:
        c = g.counters
        if c is None or c.num_drafts == 0:
            continue
        tau = spec_counters.counters_tau(c) or 1.0
        k = g.k or len(c.accepted_per_pos)
        checks = {
            "accepted <= draft tokens": c.num_accepted_tokens <= c.num_draft_tokens,
            "per-position sum = accepted": sum(c.accepted_per_pos) == c.num_accepted_tokens,
            "1 <= tau <= K+1": 1.0 <= tau <= k + 1 + 1e-9,
        }
        for name, ok in checks.items():
            out.append(CounterCheck(group_id=g.group_id, check=name, ok=bool(ok)))
    return out


def cross_check(
    groups: Sequence[GroupSummary],
    targets: Sequence[TargetSpec],
    draft_attention: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
) -> list[CrossCheckRow]:
    """Reference-simulator τ next to vLLM τ for the same model, method, K and prompts.

    Targets are paired when they name the same ``model`` (and, for
    ``model: tiny``, the same ``assets``) and one of them runs ``engine:
    reference``; groups (and their turn slices) are paired when they have the same slice, method kind,
    speculator, K, dataset and temperature. A gap is *flagged* when the two
    95% intervals do not overlap: either the checkpoint is served differently
    from how it was trained (e.g. attention flags) or an engine has a bug.

    ``draft_attention`` ((target, method) → :func:`specbench.engines.
    draft_attention.block_attention` of the served checkpoint) adds
    ``config_mismatch``: the reason when vLLM serves the draft block with an
    attention it was not trained with, a fact of the checkpoint's config that
    holds whether or not this drafter's τ shows it (``flag`` stays the τ test).
    """
    draft_attention = draft_attention or {}
    engine_of = {t.name: t.engine for t in targets}
    model_of = {t.name: (t.model, t.assets) for t in targets}
    speculator_of = {(t.name, m.label): m.speculator for t in targets for m in t.methods}
    out = []
    refs = [g for g in groups if engine_of.get(g.target) == "reference" and g.tau is not None]
    for r in refs:
        assert r.tau is not None
        for g in groups:
            if (
                engine_of.get(g.target) == "reference"
                or model_of.get(g.target) != model_of.get(r.target)
                or (g.method_kind, g.k, g.dataset, g.temperature, g.slice) != (r.method_kind, r.k, r.dataset,
                                                                                r.temperature, r.slice)
                or speculator_of.get((g.target, g.family or g.method)) != speculator_of.get((r.target, r.family or r.method))
                or g.tau is None
            ):
                continue
            assert g.tau is not None
            gap = stats.significant_change(r.tau, g.tau)
            served = draft_attention.get((g.target, g.method)) or {}
            mismatch = served.get("why") if served.get("mismatch") else None
            notes = ["serving/training mismatch or engine bug"] if gap else []
            if mismatch:
                notes.append(mismatch + ("" if gap else "; τ agrees within its intervals on these prompts"))
            out.append(
                CrossCheckRow(
                    method=g.method,
                    method_kind=g.method_kind,
                    k=g.k,
                    dataset=g.dataset,
                    vllm_group=g.group_id,
                    reference_group=r.group_id,
                    vllm_tau=g.tau,
                    reference_tau=r.tau,
                    vllm_tokens_per_step=g.tokens_per_step,
                    reference_tokens_per_step=r.tokens_per_step,
                    target=f"{g.target} vs {r.target}",
                    flag=gap,
                    config_mismatch=mismatch,
                    note="; ".join(notes),
                )
            )
    return out
