"""Parsing vLLM's Prometheus exposition into spec-decode counters (hand-written text)."""

from __future__ import annotations

import pytest

from specbench.engines.prom import (
    CounterReset,
    PromSnapshot,
    parse_metrics,
    parse_spec_counters,
    served_mismatch,
    spec_delta,
)
from specbench.results.counters import counters_tau as tau
from specbench.results.counters import per_position_rates
from specbench.results.records import SpecCounters

EXPOSITION = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 2109.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 120.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="tiny"} 30.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 360.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="tiny"} 90.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 300.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="tiny"} 45.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 110.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 100.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="0"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="2"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="1"} 15.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 1234.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 7.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 10.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.5
"""


def test_parse_sums_engines_and_positions() -> None:
    snap = parse_metrics(EXPOSITION)
    assert snap.spec == SpecCounters(
        num_drafts=150, num_draft_tokens=450, num_accepted_tokens=345, accepted_per_pos=[135, 115, 95]
    )
    assert sum(snap.spec.accepted_per_pos) == snap.spec.num_accepted_tokens
    assert snap.totals == {"vllm:generation_tokens": 1234.0, "vllm:request_success": 10.0}


def test_parse_without_type_lines_and_created_samples() -> None:
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 4\n'
        'vllm:spec_decode_num_drafts_created{engine="0"} 1700000000\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 12\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 9\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 4\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 4\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="2"} 1\n'
    )
    c = parse_spec_counters(text)
    assert c == SpecCounters(
        num_drafts=4, num_draft_tokens=12, num_accepted_tokens=9, accepted_per_pos=[4, 4, 1]
    )


def test_no_spec_metrics_is_none() -> None:
    text = '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine="0"} 5.0\n'
    snap = parse_metrics(text)
    assert snap.spec is None and snap.totals == {"vllm:generation_tokens": 5.0}
    assert parse_spec_counters("") is None


def test_delta_tau_and_rates() -> None:
    before = parse_metrics(EXPOSITION)
    later = (
        EXPOSITION.replace(
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 120.0',
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 130.0',
        )
        .replace(
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 360.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 390.0',
        )
        .replace(
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 300.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 330.0',
        )
    )
    for pos, v in (("0", 110), ("1", 100), ("2", 90)):
        later = later.replace(f'position="{pos}"}} {v}.0', f'position="{pos}"}} {v + 10}.0')
    d = parse_metrics(later) - before
    assert isinstance(d, PromSnapshot)
    assert d.spec == SpecCounters(
        num_drafts=10, num_draft_tokens=30, num_accepted_tokens=30, accepted_per_pos=[10, 10, 10]
    )
    assert tau(d.spec) == 4.0
    assert per_position_rates(d.spec) == [1.0, 1.0, 1.0]
    assert d.totals == {"vllm:generation_tokens": 0.0, "vllm:request_success": 0.0}


def test_tau_edge_cases() -> None:
    assert tau(None) is None
    assert tau(SpecCounters()) is None
    assert tau(SpecCounters(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=6)) == 2.5


def test_reset_is_detected() -> None:
    a = SpecCounters(num_drafts=10, num_draft_tokens=30, num_accepted_tokens=20, accepted_per_pos=[10, 6, 4])
    b = SpecCounters(num_drafts=2, num_draft_tokens=6, num_accepted_tokens=3, accepted_per_pos=[2, 1, 0])
    with pytest.raises(CounterReset):
        spec_delta(a, b)
    with pytest.raises(CounterReset):
        spec_delta(a, None)
    assert spec_delta(None, None) is None
    assert spec_delta(None, b) == b


def _snap(drafts: int, draft_tokens: int, positions: int) -> PromSnapshot:
    return PromSnapshot(SpecCounters(num_drafts=drafts, num_draft_tokens=draft_tokens, num_accepted_tokens=0,
                                     accepted_per_pos=[0] * positions))


def test_served_mismatch_reads_method_and_k_from_the_counters() -> None:
    plain = PromSnapshot(None, {"vllm:generation_tokens": 5.0})
    k3_idle, k3_busy = _snap(10, 30, 3), _snap(50, 150, 3)
    # Consistent claims.
    assert served_mismatch(None, plain, plain) is None
    assert served_mismatch(3, k3_idle, k3_busy) is None
    # Baseline claimed, the server speculates (its families exist even before any draft).
    why = served_mismatch(None, k3_idle, k3_busy)
    assert why is not None and "baseline" in why and "K=3" in why and "40 drafts" in why
    assert served_mismatch(None, _snap(0, 0, 3), _snap(0, 0, 3)) is not None
    # Speculation claimed, the server does not speculate.
    assert "no speculation" in (served_mismatch(3, plain, plain) or "")
    # Another K: the per-position label set says so …
    assert "claims K=2" in (served_mismatch(2, k3_idle, k3_busy) or "") and "show K=3" in (
        served_mismatch(2, k3_idle, k3_busy) or "")
    # … and without per-position labels, draft tokens per draft do.
    assert "3.00 draft tokens per draft" in (served_mismatch(2, _snap(10, 30, 0), _snap(50, 150, 0)) or "")
    assert "1.00 draft tokens per draft" in (served_mismatch(2, _snap(10, 10, 0), _snap(50, 50, 0)) or "")
    assert served_mismatch(3, _snap(10, 30, 0), _snap(50, 150, 0)) is None
    # Speculation claimed but nothing drafted in the cell.
    assert "no drafts" in (served_mismatch(3, k3_idle, k3_idle) or "")
