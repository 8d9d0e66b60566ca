"""A group's workload slices (pure): per prompt category and per conversation turn, and the
category matrix.

A group whose requests span two or more categories (Spec-Bench's 13; a jsonl's
``category_field``) gets one :class:`GroupSummary` per category, and a group of
conversations run turn by turn one per turn; each is addressed by its slice id
(``…/category=coding``, ``…/turn=2``; :mod:`specbench.results.slices`), so gate rules,
the history and ``specbench.load()`` frames reach it as they reach a group. A slice's
metrics are the group's, computed on the slice's requests only: τ pooled from the
requests' own counters (the engine's pooled counters cover the whole cell), TPOT,
speed, accuracy, and against the baseline's requests of the same slice the paired
speedup and greedy identity — a later turn only on conversations whose turn 1 was
token-identical to the baseline's (:func:`specbench.analysis.metrics.pair_turns`). A turn
slice also carries the sampled equivalence test of that turn's samples when the run has
one (computed with the group's, keyed by the slice id:
:func:`specbench.analysis.equivalence.sampled_equivalence`, which says why a later
turn's samples are tested on their own).

The category matrix (:func:`category_matrix`) puts, per target, dataset, temperature
and load, every method·K against every category: the slice's τ and its ratio to the
reference method's τ on the same prompts (:func:`~specbench.analysis.method_comparison.
paired_tau_ratio`), with ``too_few`` where the category has fewer prompts than an
interval needs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from specbench.analysis import group_acceptance, metrics, step_time
from specbench.analysis.method_comparison import best_group, group_family, paired_tau_ratio
from specbench.results.parts import CategoryCell, Equivalence
from specbench.results.records import RequestRecord
from specbench.results.slices import Slice, sliced_group_id, split_group_id
from specbench.results.summary import GroupSummary, TurnOneIdentity

#: Fewer prompts than this in a category: the matrix shows the value and says it has no interval.
MIN_PROMPTS_FOR_INTERVAL = 5

NO_REQUEST_COUNTERS = ("τ of a slice needs each request's own counters (offline at batch size 1, or a server "
                       "with per-request spec-decode metrics); this engine pooled them per cell")

Categories = Mapping[tuple[str, str], str]  # (dataset, prompt id) → category


def unit_id(r: RequestRecord) -> str:
    """The prompt a record answers: its conversation's id for a conversation's turns."""
    return r.conversation_id or r.prompt_id


def category_of(r: RequestRecord, dataset: str, categories: Categories) -> str | None:
    return categories.get((dataset, unit_id(r)))


def _slicers(g: GroupSummary, reqs: Sequence[RequestRecord], categories: Categories
             ) -> list[tuple[str, Callable[[RequestRecord], object]]]:
    """The slice keys this group splits on: category with two or more categories, turn with two or more turns."""
    out: list[tuple[str, Callable[[RequestRecord], object]]] = []
    if len({category_of(r, g.dataset, categories) for r in reqs} - {None}) >= 2:
        out.append(("category", lambda r: category_of(r, g.dataset, categories)))
    if len({r.turn for r in reqs} - {None}) >= 2:
        out.append(("turn", lambda r: r.turn))
    return out


def _summary(g: GroupSummary, key: str, value: object, reqs: list[RequestRecord],
             scores: Mapping[tuple[str, str, int], dict], equivalence: Mapping[str, Equivalence]) -> GroupSummary:
    base_id, base_slice = split_group_id(g.group_id)
    s = (g.slice or base_slice).model_copy(update={key: value})
    ok = [r for r in reqs if r.error is None]
    out = GroupSummary(
        group_id=sliced_group_id(base_id, s), target=g.target, method=g.method, method_kind=g.method_kind, k=g.k,
        family=g.family, dataset=g.dataset, temperature=g.temperature, batch_size=g.batch_size,
        request_rate=g.request_rate, slice=Slice.model_validate(s.model_dump()), status=g.status,
        n_requests=len(reqs), n_errors=len(reqs) - len(ok), output_tokens=sum(r.num_output_tokens for r in ok),
    )
    out.equivalence = equivalence.get(out.group_id)
    if g.method_kind != "baseline":
        if ok and all(r.spec is not None for r in ok):
            counters = group_acceptance.sum_counters(r.spec for r in ok)
            if counters is not None:
                out.counters = counters
                acc = group_acceptance.acceptance(counters, ok, g.k)
                out.tau, out.tau_per_request = acc.tau, acc.tau_per_request
                out.per_position, out.draft_acceptance_rate = acc.per_position, acc.draft_acceptance_rate
                out.non_degenerate = group_acceptance.non_degenerate(out, ok)
        elif ok:
            out.reasons = [NO_REQUEST_COUNTERS]
    if ok:
        metrics.assign_speed(out, metrics.speed(ok))
        out.tpot_s = step_time.tpot_estimate(ok)
    out.accuracy = metrics.group_accuracy(reqs, scores)
    out.metrics = metrics.declared_metrics(out.counters, reqs)
    return out


def _in_slice(reqs: Sequence[RequestRecord], key: str, value: object, dataset: str, categories: Categories
              ) -> list[RequestRecord]:
    return [r for r in reqs if (category_of(r, dataset, categories) if key == "category" else r.turn) == value]


def workload_slices(groups: Sequence[GroupSummary], group_requests: Mapping[str, list[RequestRecord]],
                    categories: Categories, scores: Mapping[tuple[str, str, int], dict] | None = None,
                    equivalence: Mapping[str, Equivalence] | None = None) -> list[GroupSummary]:
    """Every group's category and turn slices, with their comparisons against the baseline's same slice
    (``equivalence``: slice id → its lossless checks, as for a group)."""
    scores = scores or {}
    equivalence = equivalence or {}
    slices: list[tuple[GroupSummary, GroupSummary, str, object]] = []  # (group, slice, key, value)
    for g in groups:
        reqs = group_requests.get(g.group_id, [])
        if g.status not in ("ok", "partial") or not reqs:
            continue
        for key, of in _slicers(g, reqs, categories):
            parts: dict[object, list[RequestRecord]] = defaultdict(list)
            for r in reqs:
                parts[of(r)].append(r)
            for value in sorted(v for v in parts if v is not None):  # type: ignore[type-var]
                slices.append((g, _summary(g, key, value, parts[value], scores, equivalence), key, value))
    baseline_of = {g.baseline_key: g for g in groups if g.method_kind == "baseline" and g.status in ("ok", "partial")}
    for g, s, key, value in slices:
        base = baseline_of.get(g.baseline_key)
        if g.method_kind == "baseline" or base is None:
            continue
        pairs = metrics.pair_turns(group_requests[g.group_id], group_requests[base.group_id])

        m, b = (_in_slice(pairs.method, key, value, g.dataset, categories),
                _in_slice(pairs.baseline, key, value, g.dataset, categories))
        s.speedup = metrics.paired_speedup(m, b)
        if s.non_degenerate is not None:
            s.non_degenerate.speedup = metrics.non_degenerate_speedup(s, m, b)
        s.accuracy_delta = metrics.accuracy_delta(m, b, scores)
        if g.temperature == 0:
            s.greedy_match = metrics.greedy_match(m, b)
        if key == "turn" and value != 1:
            s.turn1_identical = TurnOneIdentity(identical=pairs.identical, conversations=pairs.conversations)
    return [s for _, s, _, _ in slices]


def category_matrix(groups: Sequence[GroupSummary], slices: Sequence[GroupSummary],
                    group_requests: Mapping[str, list[RequestRecord]], categories: Categories,
                    reference_of: Mapping[str, str]) -> list[CategoryCell]:
    """Per (target, dataset, T, load): every speculative method·K × category, τ and τ ratio to the reference."""
    by_category = {(split_group_id(s.group_id)[0], s.slice.category): s
                   for s in slices if s.slice is not None and s.slice.category is not None}
    buckets: dict[tuple, list[GroupSummary]] = defaultdict(list)
    for g in groups:
        if g.method_kind != "baseline" and any(k[0] == split_group_id(g.group_id)[0] for k in by_category):
            buckets[g.baseline_key].append(g)
    out: list[CategoryCell] = []
    for bucket in buckets.values():
        ref_name = reference_of.get(bucket[0].target)
        ref_arms = [g for g in bucket if group_family(g) == ref_name and g.tau is not None]
        ref = best_group(ref_arms) if ref_arms else None
        for g in sorted(bucket, key=lambda g: (g.method, g.k or 0)):
            gid = split_group_id(g.group_id)[0]
            for (sid, cat), s in sorted(by_category.items(), key=lambda kv: str(kv[0][1])):
                if sid != gid:
                    continue
                assert cat is not None
                reqs = [r for r in group_requests.get(g.group_id, []) if r.error is None]
                n = len({unit_id(r) for r in reqs if category_of(r, g.dataset, categories) == cat})
                ratio = None
                ref_slice = by_category.get((split_group_id(ref.group_id)[0], cat)) if ref is not None else None
                if ref is not None and ref is not g:
                    ref_reqs = [r for r in group_requests.get(ref.group_id, [])
                                if category_of(r, ref.dataset, categories) == cat]
                    ratio = paired_tau_ratio([r for r in reqs if category_of(r, g.dataset, categories) == cat], ref_reqs)
                out.append(CategoryCell(
                    target=g.target, dataset=g.dataset, temperature=g.temperature, batch_size=g.batch_size,
                    request_rate=g.request_rate, method=g.method, method_kind=g.method_kind, k=g.k,
                    group_id=s.group_id, category=cat, n_prompts=n, tau=s.tau, speedup=s.speedup,
                    reference=ref_name if ref is not None else None, tau_ratio=ratio,
                    reference_group=ref_slice.group_id if ratio is not None and ref_slice is not None else None,
                    too_few=n < MIN_PROMPTS_FOR_INTERVAL,
                ))
    return out
