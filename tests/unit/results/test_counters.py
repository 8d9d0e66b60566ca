"""vLLM's spec-decode counters: each source's one parser, and τ computed in one place."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from support.factories import cell, cell_record, request

from specbench.engines.vllm_offline import counters_from_request_metrics
from specbench.results import counters
from specbench.results.records import SpecCounters

# -- the parsers: one per source, the same counters from each ------------------------------------


def test_offline_metrics_sum_engines_and_positions() -> None:
    """``LLM.get_metrics()``: a Counter per family (one per engine), the per-position Vector; other
    families ignored."""
    metrics = [
        SimpleNamespace(name="vllm:spec_decode_num_drafts", value=10),
        SimpleNamespace(name="vllm:spec_decode_num_drafts", value=5),
        SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=45),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=21),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=[9, 6, 3]),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=[2, 1]),
        SimpleNamespace(name="vllm:generation_tokens", value=999),
    ]
    c = counters.from_offline(metrics)
    assert c == SpecCounters(num_drafts=15, num_draft_tokens=45, num_accepted_tokens=21, accepted_per_pos=[11, 7, 3])
    assert counters.from_offline([]) == SpecCounters()


def test_request_histogram_and_response_give_the_same_counters() -> None:
    # K=3: 2 steps accepted 0, 1 step accepted 2, 3 steps accepted 3 (chain rule: position i ← steps with j > i).
    c = counters.from_request([2, 0, 1, 3], 18, 3)
    assert c == SpecCounters(num_drafts=6, num_draft_tokens=18, num_accepted_tokens=11, accepted_per_pos=[4, 4, 3])
    sd = {"acceptance_histogram": [2, 0, 1, 3], "num_draft_tokens": 18, "num_spec_tokens": 3}
    assert counters.from_response(sd, None) == c
    assert counters.from_request([4], 0, 3).accepted_per_pos == [0, 0, 0]  # K positions even when none accepted
    assert counters.from_response({}, 3) is None


def test_per_request_counters_from_vllm_histogram() -> None:
    # K=3: 2 steps accepted 0, 1 step accepted 2, 3 steps accepted 3.
    metrics = SimpleNamespace(histogram=[2, 0, 1, 3], num_draft_tokens=18)
    c = counters_from_request_metrics(metrics, 3)
    assert c == SpecCounters(num_drafts=6, num_draft_tokens=18, num_accepted_tokens=11, accepted_per_pos=[4, 4, 3])
    assert sum(c.accepted_per_pos) == c.num_accepted_tokens


def test_prometheus_and_offline_agree() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 15.0\n'
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 45.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 21.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 7.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 11.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 3.0\n'
        "# TYPE vllm:prompt_tokens counter\n"
        'vllm:prompt_tokens_total{engine="0"} 70.0\n'
    )
    spec, totals = counters.from_prometheus(text, ("vllm:prompt_tokens",))
    offline = counters.from_offline([
        SimpleNamespace(name="vllm:spec_decode_num_drafts", value=15),
        SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=45),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=21),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=[11, 7, 3]),
    ])
    assert spec == offline and totals == {"vllm:prompt_tokens": 70.0}
    assert counters.from_prometheus("# TYPE x counter\nx_total 1.0\n") == (None, {})


def test_numbers_from_counters() -> None:
    c = SpecCounters(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=6, accepted_per_pos=[3, 2, 1])
    assert counters.counters_tau(c) == 2.5
    assert counters.counters_tau(None) is None and counters.counters_tau(SpecCounters()) is None
    assert counters.per_position_rates(c) == [0.75, 0.5, 0.25]
    assert counters.per_position_rates(c, 4) == [0.75, 0.5, 0.25, 0.0]
    assert counters.position_rate(SpecCounters(), 0) is None
    assert counters.draft_acceptance_rate(c) == 0.5 and counters.drafted_per_step(c) == 3.0
    assert counters.draft_acceptance_rate(SpecCounters()) is None and counters.drafted_per_step(SpecCounters()) is None
    assert list(counters.tau(np.array([0.0, 3.0]), np.array([1.0, 1.0]))) == [1.0, 4.0]


# -- τ is computed in one place: patch it, find the sentinel everywhere τ is shown ---------------

SENTINEL = 7.25  # no real τ at K=3 (1 ≤ τ ≤ 4)


def _sentinel(accepted, drafts):  # noqa: ANN001, ANN202 - numbers or arrays, as counters.tau takes
    return accepted * 0 + SENTINEL


def test_the_one_tau_function_reaches_every_place_tau_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    from specbench import frames
    from specbench.analysis import sequential
    from specbench.analysis.metrics import summarize
    from specbench.analysis.serving_metrics import summarize_cell
    from specbench.config.plan import Plan
    from specbench.config.stop_rule import StopRule
    from specbench.results.manifest import RunManifest
    from specbench.zoo import evaluate

    cm = cell("eagle3", k=3)
    specs = [SpecCounters(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=a, accepted_per_pos=[a, 0, 0])
             for a in (1, 2, 3, 4, 2, 3)]
    reqs = [request(cm.cell_id, f"p{i}", tokens=[1] * 12, latency_s=0.5 + i / 20, ttft_s=0.1, spec=s)
            for i, s in enumerate(specs)]
    pooled = specs[0]
    for s in specs[1:]:
        pooled = pooled + s
    cells = [cell_record(cm.cell_id, counters=pooled, wall_time_s=2.0)]
    manifest = RunManifest.model_construct(plan=Plan.model_construct(cells=[cm], engines=[]))

    def shown() -> dict[str, float]:
        summary = summarize("r", "s", [cm], cells, reqs)
        g = summary.group(cm.group_id)
        serving = summarize_cell(reqs, 2.0, counters=pooled)
        units = sequential.ordered_units(sequential.prompt_units("tau", reqs), [f"p{i}" for i in range(6)])
        stop = sequential.should_stop(StopRule(metric="tau", rel_half_width=0.5, min_prompts=2), units)
        return {
            "summary τ": g.tau.value, "summary τ (request mean)": g.tau_per_request.value,
            "frames: groups": frames.groups_frame(summary)["tau"].iloc[0],
            "frames: requests": frames.requests_frame(manifest, reqs)["tau"].iloc[0],
            "frames: cells": frames.cells_frame(manifest, cells)["tau"].iloc[0],
            "serving τ": serving.tau_pooled, "serving τ (request mean)": serving.tau_mean_per_request,
            "stop rule": stop.estimate,
            "zoo evaluation": evaluate.counter_delta_tau({"accepted": 6, "drafts": 4}),
        }

    real = shown()
    assert all(v is not None and 1 <= v <= 4 for v in real.values()), real
    monkeypatch.setattr(counters, "tau", _sentinel)
    patched = shown()
    assert {k: v for k, v in patched.items() if v != pytest.approx(SENTINEL)} == {}
