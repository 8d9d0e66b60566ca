"""An A/B run's records read as paired rounds, and its verdicts (pure: records in, models out; issue 36).

An A/B run (``specbench ab``) holds every target twice, ``T@a`` and ``T@b`` (specbench.config.arms);
its groups pair by the group id with the arm left out. Per group and round, a speed metric's value in
each arm is computed over that round's requests of the arm (:func:`round_values`, the definitions of
docs/ab-decision.md), and its ``log(B/A)`` is one paired observation for
:func:`specbench.analysis.ab_decision.decide`. Everything here is recomputed from ``records.jsonl``
and ``cells.jsonl``: ``specbench ab`` decides with it after every round, and the stored ``ab.json``
is the same computation over the finished run.

Deterministic comparisons (CPU float32: the engine is deterministic there) sit beside the speed
verdicts: τ of each arm (vLLM's definition, ``1 + accepted / drafts`` over the cell), and B's token
identity to A's outputs (share of requests whose output tokens are equal).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from specbench.analysis.ab_decision import ABRule, ABVerdict, block_units, decide, decide_pooled, log_ratios
from specbench.analysis.step_time import decode_time, decoding_steps
from specbench.config.arms import ARM_SEP, arm_of, base_target
from specbench.config.plan import key_target
from specbench.results import speed_estimators
from specbench.results.counters import tau
from specbench.results.manifest import RunManifest
from specbench.results.records import CellRecord, RequestRecord

#: The speed metrics an A/B decides by default (catalogue names).
AB_METRICS = ("tpot_s", "output_tps")


def arm_vllm_versions(manifest: RunManifest) -> dict[str, str]:
    """Per arm, the vLLM release(s) its engines reported once started (``{"a": "0.32.0", "b": "0.31.0"}``);
    an arm none of whose engines started is left out."""
    seen: dict[str, set[str]] = {}
    for e in manifest.engines:
        arm = arm_of(key_target(e.key or ""))
        if arm is not None and e.describe is not None and e.describe.vllm_version:
            seen.setdefault(arm, set()).add(e.describe.vllm_version)
    return {arm: ", ".join(sorted(v)) for arm, v in seen.items()}


def round_values(recs: Sequence[RequestRecord], speculative: bool) -> dict[str, float]:
    """The speed metrics of one arm's requests in one round (:mod:`specbench.results.speed_estimators`): TPOT =
    Σ decode time / Σ (tokens − 1), time per decoding step = Σ decode time / Σ steps, output tok/s per stream =
    Σ output tokens / Σ latency."""
    ok = [r for r in recs if r.error is None and r.latency_s]
    dec = [(decode_time(r), r.num_output_tokens - 1, decoding_steps(r, speculative)) for r in ok]
    good = [(d, t, s) for d, t, s in dec if d is not None and t > 0]
    out: dict[str, float] = {}
    if good:
        decode_s = sum(d for d, _, _ in good)
        out["tpot_s"] = speed_estimators.tpot(decode_s, sum(t for _, t, _ in good))
        steps = [s for _, _, s in good if s]
        if len(steps) == len(good):
            out["step_time_s"] = speed_estimators.step_time(decode_s, sum(steps))
    if ok:
        out["output_tps"] = speed_estimators.token_rate(sum(r.num_output_tokens for r in ok),
                                                        sum(r.latency_s or 0.0 for r in ok))
    return out


def group_of(cell_id: str) -> tuple[str, str | None]:
    """``(group id without the arm, arm)`` of a cell (``tiny@b/eagle3/he/T0/b1/r0`` → ``tiny/eagle3/he/T0/b1``, b)."""
    group = cell_id.rsplit("/", 1)[0]
    target, _, rest = group.partition("/")
    return f"{base_target(target)}/{rest}", arm_of(target)


def method_of(group: str) -> str:
    """The method a group belongs to (``tiny/eagle3/he/T0/b1`` → ``tiny/eagle3``), the unit of pooling."""
    return "/".join(group.split("/")[:2])


def paired_rounds(records: Iterable[RequestRecord]) -> dict[str, dict[str, list[float]]]:
    """``{metric: {group: [log(B/A) per unit]}}`` over the rounds both arms finished, in round order; a unit is a
    round, or with engine instances (the suite's ``instances``) an instance's block of rounds
    (:func:`~specbench.analysis.ab_decision.block_units`)."""
    by: dict[tuple[str, str, int], list[RequestRecord]] = defaultdict(list)
    instance_of: dict[int, int] = {}
    for r in records:
        group, arm = group_of(r.cell_id)
        if arm is not None:
            by[(group, arm, r.round or 0)].append(r)
            instance_of[r.round or 0] = r.instance or 0
    out: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for group in sorted({g for g, _, _ in by}):
        speculative = "/baseline/" not in f"/{group}/"
        rounds = sorted({rd for g, arm, rd in by if g == group and arm == "a"}
                        & {rd for g, arm, rd in by if g == group and arm == "b"})
        per: dict[str, tuple[list[float], list[float], list[int]]] = defaultdict(lambda: ([], [], []))
        for rd in rounds:
            va, vb = round_values(by[(group, "a", rd)], speculative), round_values(by[(group, "b", rd)], speculative)
            for m in va.keys() & vb.keys():
                if va[m] > 0 and vb[m] > 0:
                    per[m][0].append(va[m])
                    per[m][1].append(vb[m])
                    per[m][2].append(instance_of[rd])
        for m, (a, b, inst) in per.items():
            units, _ = block_units(list(zip(inst, log_ratios(a, b), strict=True)))
            out[m][group] = [float(x) for x in units]
    return dict(out)


class GroupExact(BaseModel):
    """A group's deterministic comparison: τ of each arm (None: no drafts) and B's token identity to A."""

    model_config = ConfigDict(extra="forbid")

    group: str
    tau_a: float | None = None
    tau_b: float | None = None
    identical: int = 0  # requests (prompt, sample) whose output tokens are equal in both arms
    compared: int = 0  # requests both arms ran

    @property
    def tau_equal(self) -> bool:
        return self.tau_a == self.tau_b


class ABResult(BaseModel):
    """What ``specbench ab`` decided: per group and per method pooled, a verdict per gated metric."""

    model_config = ConfigDict(extra="forbid")

    rule: ABRule
    metrics: list[str]
    arms: dict[str, str] = Field(default_factory=dict)  # arm -> how it is described
    groups: list[ABVerdict] = Field(default_factory=list)  # per (group, metric); ABVerdict.metric, group in label
    group_ids: list[str] = Field(default_factory=list)  # the group of each entry of ``groups``
    pooled: list[ABVerdict] = Field(default_factory=list)
    pooled_ids: list[str] = Field(default_factory=list)  # the method of each entry of ``pooled``
    exact: list[GroupExact] = Field(default_factory=list)
    rounds_run: int = 0
    instances: int = 1  # engine instances the rounds ran on; > 1: a verdict's units are instances' blocks of rounds
    budget_s: float | None = None
    budget_ended: bool = False

    def verdicts(self) -> list[tuple[str, ABVerdict]]:
        return [*zip(self.group_ids, self.groups, strict=True), *zip(self.pooled_ids, self.pooled, strict=True)]

    @property
    def regressions(self) -> list[tuple[str, ABVerdict]]:
        return [(g, v) for g, v in self.verdicts() if v.verdict == "different"]

    @property
    def undecided(self) -> list[tuple[str, ABVerdict]]:
        return [(g, v) for g, v in self.verdicts() if v.verdict == "undecided"]


def decide_groups(paired: dict[str, dict[str, list[float]]], metrics: Sequence[str], rule: ABRule
                  ) -> tuple[list[tuple[str, ABVerdict]], list[tuple[str, ABVerdict]]]:
    """Per (group, metric) and per (method, metric) pooled: the verdict on the rounds so far."""
    groups, pooled = [], []
    for m in metrics:
        per_group = paired.get(m, {})
        for g in sorted(per_group):
            groups.append((g, decide(per_group[g], m, rule)))
        by_method: dict[str, dict[str, list[float]]] = defaultdict(dict)
        for g, lr in per_group.items():
            by_method[method_of(g)][g] = lr
        for meth in sorted(by_method):
            if len(by_method[meth]) > 1:
                pooled.append((meth, decide_pooled(by_method[meth], m, rule)))
    return groups, pooled


def exact_comparisons(records: Iterable[RequestRecord], cells: Iterable[CellRecord]) -> list[GroupExact]:
    """Per group: τ of each arm from its cells' counters, and B's token identity to A per request."""
    out: dict[str, GroupExact] = {}
    counters: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for c in cells:
        group, arm = group_of(c.cell_id)
        if arm is None:
            continue
        out.setdefault(group, GroupExact(group=group))
        if c.status == "ok" and c.counters is not None:
            counters[(group, arm)][0] += c.counters.num_accepted_tokens
            counters[(group, arm)][1] += c.counters.num_drafts
    tokens: dict[tuple[str, str, int, int], dict[str, list[int]]] = defaultdict(dict)
    for r in records:
        group, arm = group_of(r.cell_id)
        if arm is not None and r.error is None:
            tokens[(group, r.prompt_id, r.sample_index, r.repeat)][arm] = r.output_token_ids
    for (group, _p, _s, _r), arms in tokens.items():
        g = out.setdefault(group, GroupExact(group=group))
        if "a" in arms and "b" in arms:
            g.compared += 1
            g.identical += arms["a"] == arms["b"]
    for (group, arm), (acc, drafts) in counters.items():
        if drafts and arm == "a":
            out[group].tau_a = tau(acc, drafts)
        elif drafts and arm == "b":
            out[group].tau_b = tau(acc, drafts)
    return [out[g] for g in sorted(out)]


def ab_result(records: Sequence[RequestRecord], cells: Sequence[CellRecord], rule: ABRule,
              metrics: Sequence[str] = AB_METRICS, **extra: object) -> ABResult:
    """The A/B result of a run's records (the decision after its last round)."""
    groups, pooled = decide_groups(paired_rounds(records), metrics, rule)
    rounds = max((r.round or 0) + 1 for r in records) if records else 0
    instances = len({r.instance or 0 for r in records}) or 1
    return ABResult(rule=rule, metrics=list(metrics), groups=[v for _, v in groups], group_ids=[g for g, _ in groups],
                    pooled=[v for _, v in pooled], pooled_ids=[g for g, _ in pooled],
                    exact=exact_comparisons(records, cells), rounds_run=rounds, instances=instances,
                    **extra)  # type: ignore[arg-type]


__all__ = ["AB_METRICS", "ARM_SEP", "ABResult", "GroupExact", "ab_result", "decide_groups", "exact_comparisons",
           "group_of", "method_of", "paired_rounds", "round_values"]
