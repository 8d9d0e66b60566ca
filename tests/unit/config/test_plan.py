"""The planner (specbench.config.plan) on small suites: cells and engines, the launched vLLM command, each
method's speculative config, request-rate loads and their group ids, and speedups paired at the same load."""

import shlex
import sys

import pytest
from support.factories import cell_record, request

from specbench.config.methods import METHODS
from specbench.config.plan import expand
from specbench.config.suite import load_suite
from specbench.engines.vllm_args import vllm_serve_command

SUITE = """
name: t
targets:
  - name: a
    model: some/model
    methods:
      - method: baseline
      - method: p-eagle
        speculator: org/peagle
        num_speculative_tokens: 4
datasets:
  - name: h
    kind: humaneval
sampling:
  temperatures: [0.0, 1.0]
load:
  batch_sizes: [1, 8]
repeats: 2
"""


def test_expand_cells_and_engines(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SUITE)
    plan = expand(load_suite(p))
    assert len(plan.engines) == 2
    assert len(plan.cells) == 2 * 2 * 2 * 2  # methods × temps × loads × repeats
    assert len({c.cell_id for c in plan.cells}) == len(plan.cells)
    pe = plan.engines[1]
    assert pe.speculative_config == {
        "method": "eagle3", "model": "org/peagle", "num_speculative_tokens": 4, "parallel_drafting": True,
    }
    cmd = vllm_serve_command(pe, {"model": "some/model", "speculative_config": pe.speculative_config,
                                  "enforce_eager": True, "max_model_len": 512}, platform="cuda")
    assert cmd.startswith("vllm serve some/model") and "--enforce-eager" in cmd and "--max-model-len 512" in cmd
    assert '"parallel_drafting": true' in cmd and "--model" not in cmd


def test_dry_run_command_is_the_launched_command(tmp_path):
    """One kwargs → server-flags translation: --dry-run prints exactly what the server launcher runs."""
    from specbench.engines.vllm_server import VllmServerEngine

    p = tmp_path / "s.yaml"
    p.write_text(SUITE)
    pe = expand(load_suite(p)).engines[1]
    kwargs = {"model": "/m/some model", "seed": 0, "disable_log_stats": False, "enforce_eager": True,
              "trust_remote_code": False, "max_model_len": None, "speculative_config": pe.speculative_config,
              "per_request_spec_decode_metrics": "detailed", "limit_mm_per_prompt": {"image": 0}}
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    line = vllm_serve_command(pe, kwargs, platform="cpu", env=env)
    words = shlex.split(line)
    assert words[0] == "VLLM_CPU_KVCACHE_SPACE=1"
    launched = VllmServerEngine(pe, kwargs, tmp_path / "log", env).server_command(8123)
    assert launched[-4:] == ["--host", "127.0.0.1", "--port", "8123"]
    assert words[1:] == launched[:-4]
    assert launched[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    # Booleans: True → --flag, False → --no-flag except store_true options; None omitted.
    assert "--no-trust-remote-code" in words and "--enforce-eager" in words
    assert not any("disable-log-stats" in w or "max-model-len" in w for w in words)
    cuda = shlex.split(vllm_serve_command(pe, kwargs, platform="cuda"))
    assert cuda[:3] == ["vllm", "serve", "/m/some model"] and sorted(cuda[3:]) == sorted(launched[5:-4])


def test_every_speculative_method_passes_method_explicitly():
    for m in METHODS.values():
        cfg = m.speculative_config(3, "x" if m.needs_speculator else None)
        assert cfg is None if m.vllm_method is None else cfg["method"] == m.vllm_method


RATES = """
name: r
targets:
  - name: a
    model: some/model
    engine: vllm-server
    methods:
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
datasets:
  - name: h
    kind: humaneval
load:
  concurrency: [1, 4]
  request_rates: [0.5, 2]
  max_concurrency: 8
repeats: 2
"""


def _plan(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return expand(load_suite(p))


def test_request_rates_add_cells_with_their_own_group_ids(tmp_path):
    plan = _plan(tmp_path, RATES)
    assert len(plan.cells) == 2 * (2 + 2) * 2  # methods × (concurrencies + rates) × repeats
    assert len({c.cell_id for c in plan.cells}) == len(plan.cells)
    by_gid = {c.group_id: c for c in plan.cells}
    # Concurrency cells keep the ids they always had (stored runs still load) …
    assert by_gid["a/ngram/h/T0/b4"].request_rate is None and by_gid["a/ngram/h/T0/b4"].batch_size == 4
    # … and each rate is a load of its own, capped at max_concurrency in flight.
    r2 = by_gid["a/ngram/h/T0/rate2"]
    assert r2.request_rate == 2.0 and r2.batch_size == 8 and r2.cell_id in {"a/ngram/h/T0/rate2/r0", "a/ngram/h/T0/rate2/r1"}
    assert by_gid["a/baseline/h/T0/rate0.5"].request_rate == 0.5
    assert r2.load_label == "2 req/s (≤8 in flight)" and by_gid["a/ngram/h/T0/b4"].load_label == "4"
    # A method meets its baseline at the same rate only.
    keys = {c.baseline_group_key for c in plan.cells if c.method == "baseline"}
    assert r2.baseline_group_key in keys
    assert r2.baseline_group_key != by_gid["a/ngram/h/T0/rate0.5"].baseline_group_key
    assert len(keys) == 4


def test_rates_alone_add_no_default_batch_size_cell(tmp_path):
    text = RATES.replace("  concurrency: [1, 4]\n", "").replace("  max_concurrency: 8\n", "")
    plan = _plan(tmp_path, text)
    assert sorted({c.group_id.rsplit("/", 1)[1] for c in plan.cells}) == ["rate0.5", "rate2"]
    assert all(c.batch_size == 0 for c in plan.cells)  # no cap
    # Listing batch sizes explicitly keeps them.
    plan = _plan(tmp_path, text.replace("load:\n", "load:\n  batch_sizes: [1]\n"))
    assert sorted({c.group_id.rsplit("/", 1)[1] for c in plan.cells}) == ["b1", "rate0.5", "rate2"]


def test_old_manifest_cells_without_request_rate_still_validate():
    from specbench.config.plan import Cell, Plan

    old = {"cell_id": "a/ngram/h/T0/b4/r0", "engine_key": "a--ngram", "target": "a", "method": "ngram",
           "method_kind": "ngram", "k": 3, "dataset": "h", "temperature": 0.0, "batch_size": 4, "repeat": 0}
    c = Cell.model_validate(old)
    assert c.request_rate is None and c.group_id == "a/ngram/h/T0/b4"
    assert Plan.model_validate({"suite_name": "s", "engines": [], "cells": [old]}).cells == [c]


def _rec(cell, pid, latency, n=10):
    return request(cell, pid, tokens=n, output_text="x", latency_s=latency, ttft_s=latency / n,
                   itl_s=[latency * (n - 1) / n / (n - 1)] * (n - 1))


def test_speedup_pairs_with_the_baseline_at_the_same_rate(tmp_path):
    from specbench.analysis.metrics import summarize

    text = RATES.replace("repeats: 2", "repeats: 1").replace("  concurrency: [1, 4]\n", "")
    plan = _plan(tmp_path, text)
    # Baseline latency doubles from rate 0.5 to rate 2; ngram is 1.25× faster than the baseline at each rate.
    lat = {("baseline", 0.5): 1.0, ("baseline", 2.0): 2.0, ("ngram", 0.5): 0.8, ("ngram", 2.0): 1.6}
    reqs = [_rec(c, f"p{i}", lat[(c.method, c.request_rate)] * (1 + 0.1 * i)) for c in plan.cells for i in range(6)]
    cells = [cell_record(c, wall_time_s=3.0) for c in plan.cells]
    summary = summarize("r", "r", plan.cells, cells, reqs)
    by = {(g.method, g.request_rate): g for g in summary.groups}
    assert set(by) == set(lat)
    for rate in (0.5, 2.0):
        g = by[("ngram", rate)]
        assert g.batch_size == 8 and g.group_id.endswith(f"rate{rate:g}")
        # Paired with the wrong rate's baseline this would be 2.5 or 0.625.
        assert g.speedup is not None and g.speedup.value == pytest.approx(1.25)
