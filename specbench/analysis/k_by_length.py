"""K by batch size and input length (pure; issue 52): what a K schedule keyed on batch size alone gives up.

vLLM's dynamic speculation picks K by each step's batch size (``num_speculative_tokens_per_batch_size``); vLLM
RFC #48627 asks whether the best K also moves with context length. For a method swept over K at several batch
sizes and input lengths (a suite whose dataset sets ``input_tokens``), per (batch size, length) the fastest
K is chosen by the headline's paired rule (:func:`~specbench.analysis.headline_rounds.choose_k`: lowest pooled
TPOT; the Ks the rule does not find slower tie, the cheapest of a tie is taken), and the batch-size-only
schedule's K by the same choice over all lengths' requests of that batch size pooled. At each length the
schedule's loss is the decode speed at its K over the speed at that length's best K, decided by the rule on
the pair's paired speed units (:func:`~specbench.analysis.headline_rounds.decide_pair`), *slower* when the
schedule's K is slower there beyond the headline's margin.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from specbench.analysis.ab_decision import ABRule
from specbench.analysis.headline_rounds import choose_k, decide_pair, decode_speed_ratio
from specbench.analysis.method_comparison import speedup_ratio_verdict
from specbench.results.k_length_cell import KLengthCell
from specbench.results.records import RequestRecord
from specbench.results.summary import GroupSummary
from specbench.stats import Estimate


def k_by_length(groups: Sequence[GroupSummary], requests: Mapping[str, Sequence[RequestRecord]], rule: ABRule
                ) -> list[KLengthCell]:
    """Every (method, batch size, input length) of a K sweep measured at two lengths or more and two Ks or more
    (``requests``: group id → its requests, speed rounds included)."""
    sweeps: dict[tuple, dict[tuple[int, int], list[RequestRecord]]] = defaultdict(lambda: defaultdict(list))
    for g in groups:
        length = g.slice.input_tokens if g.slice is not None else None
        if (g.method_kind == "baseline" or g.k is None or length is None or g.lossy or g.status != "ok"
                or g.request_rate is not None):
            continue
        key = (g.target, g.dataset, g.temperature, g.family or g.method, g.batch_size)
        sweeps[key][(length, g.k)].extend(requests.get(g.group_id, ()))
    out = []
    for (target, dataset, temp, method, batch), cells in sorted(sweeps.items()):
        lengths, ks = sorted({n for n, _ in cells}), sorted({k for _, k in cells})
        if len(lengths) < 2 or len(ks) < 2:
            continue
        pooled: dict[int | None, list[RequestRecord]] = {k: [r for (_, kk), rs in cells.items() if kk == k for r in rs]
                                                         for k in ks}
        batch_k = choose_k(pooled, rule).k
        for n in lengths:
            here: dict[int | None, list[RequestRecord]] = {k: cells.get((n, k), []) for k in ks}
            best = choose_k(here, rule)
            row = dict(target=target, dataset=dataset, temperature=temp, method=method, batch_size=batch,
                       input_tokens=n, ks=ks, best_k=best.k, best_tie=list(best.tie), batch_k=batch_k)
            if best.k == batch_k:
                out.append(KLengthCell(**row, speed_ratio=Estimate(value=1.0, ci_low=1.0, ci_high=1.0, n=0,
                                                                   method="exact"), verdict="same K"))
                continue
            verdict, units = decide_pair(here[batch_k], here[best.k], rule)
            ratio = decode_speed_ratio(verdict).model_copy(update={"rounds": units.rounds})
            out.append(KLengthCell(**row, speed_ratio=ratio, verdict=speedup_ratio_verdict(ratio, units.rounds),
                                   rounds=units.rounds, instances=units.instances))
    return out
