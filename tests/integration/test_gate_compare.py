"""Compare and gate on real runs (issue 6): two seeds of one suite, a run against itself,
a raised baseline, malformed rules, and a run whose cells all failed.

One small suite (baseline, ngram, self-drafting on the tiny target; greedy and
sampled) is run twice with different seeds; everything else reuses those runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench import api
from specbench.cli import app
from specbench.regression.run_diff import compare_runs

REPO = Path(__file__).resolve().parents[2]

SUITE = """
name: gate-seeds
targets:
  - name: tiny
    model: tiny
    dtype: float32
    max_model_len: 1024
    chat_template: false
    hardware: cpu
    engine_patches: [vllm-cpu-expand-float]
    methods:
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
      - name: self-draft
        method: draft_model
        speculator: target
        num_speculative_tokens: 3
datasets:
  - name: humaneval
    kind: humaneval
    limit: 4
sampling:
  temperatures: [0.0, 1.0]
  max_tokens: 32
  samples_per_prompt: 2
  seed: {seed}
load:
  batch_sizes: [4]
equivalence:
  greedy: true
"""

runner = CliRunner()


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory, kept_engines) -> tuple[Path, Path]:
    """Two runs of one suite (seeds 0 and 1) on the same three engines, kept running between them."""
    d = tmp_path_factory.mktemp("gate-seeds")
    runs = []
    for seed in (0, 1):
        (d / f"s{seed}.yaml").write_text(SUITE.format(seed=seed))
        runs.append(api.run(d / f"s{seed}.yaml", out=d / "results", keep=kept_engines))
    return runs[0], runs[1]


def _gate(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, ["gate", *args])
    return res.exit_code, res.output


def test_runs_measured_every_group(two_seeds):
    for run in two_seeds:
        s = api.load_summary(run)
        assert len(s.groups) == 6 and all(g.status == "ok" for g in s.groups), [
            (g.group_id, g.status, g.reasons) for g in s.groups
        ]


def test_compare_two_seeds_reports_no_significant_change(two_seeds):
    a, b = (api.load_summary(r) for r in two_seeds)
    comp = compare_runs(a, b)
    assert len(comp.groups) == 6
    sampled = [c for g in comp.groups if "/T1/" in g.group_id for c in g.changes if c.metric == "tau"]
    assert sampled, "the sampled groups' τ must be compared"
    # The seed changed the sampled tokens (so the runs really differ), yet nothing changed significantly.
    from specbench.results import rundir

    outs = [
        {(r.cell_id, r.prompt_id, r.sample_index): r.output_token_ids for r in rundir.read_requests(run)
         if "/T1/" in r.cell_id}
        for run in two_seeds
    ]
    assert outs[0].keys() == outs[1].keys() and any(outs[0][k] != outs[1][k] for k in outs[0])
    sig = [(g.group_id, c.metric, c.base, c.new) for g, c in comp.changes(significant_only=True)]
    assert sig == [], sig
    res = runner.invoke(app, ["compare", str(two_seeds[1]), "--baseline", str(two_seeds[0])])
    assert res.exit_code == 0 and "0 significant changes" in res.output, res.output


def test_gate_passes_a_run_against_itself(two_seeds):
    for run in two_seeds:
        code, out = _gate(str(run), "--baseline", str(run), "--rules", str(REPO / "gates.example.yaml"))
        assert code == 0, out
        assert "tau" in out and "equivalence" in out, out


def test_gate_on_acceptance_passes_another_seed(two_seeds, tmp_path):
    """Rules on what the method does (τ, accuracy, equivalence), not on this machine's speed."""
    (tmp_path / "rules.yaml").write_text("rules:\n  speedup: null\n")
    code, out = _gate(str(two_seeds[1]), "--baseline", str(two_seeds[0]), "--rules", str(tmp_path / "rules.yaml"))
    assert code == 0, out


def test_gate_example_rules_pass_another_seed_without_gating_speed(two_seeds):
    """Issue 22: against one earlier run and without a noise estimate, speed is reported as not gated."""
    code, out = _gate(str(two_seeds[1]), "--baseline", str(two_seeds[0]), "--rules", str(REPO / "gates.example.yaml"))
    assert code == 0, out
    assert "speed not gated: no noise estimate" in out and "FAIL speedup" not in out, out


def test_gate_fails_naming_the_rule_when_the_baseline_tau_is_raised(two_seeds, tmp_path):
    run = two_seeds[0]
    s = api.load_summary(run)
    g = s.group("tiny/self-draft/humaneval/T0/b4")
    assert g is not None and g.tau is not None
    raised = g.tau.value * 1.10  # 10% above what was measured; the rule allows a 3% drop
    expected = {"groups": {g.group_id: {"tau": {"value": raised, "ci_low": raised, "ci_high": raised}}}}
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    code, out = _gate(str(run), "--baseline", str(tmp_path / "expected.json"),
                      "--rules", str(REPO / "gates.example.yaml"))
    assert code == 1, out
    assert "tau" in out and g.group_id in out, out


def test_gate_rejects_malformed_rules(two_seeds, tmp_path):
    (tmp_path / "rules.yaml").write_text("rules:\n  tau: {max_drop_pct: -3, bogus: 1}\n")
    code, out = _gate(str(two_seeds[0]), "--baseline", str(two_seeds[1]), "--rules", str(tmp_path / "rules.yaml"))
    assert code == 2, out


def test_gate_exits_3_when_every_cell_failed(tmp_path, two_seeds):
    model = tmp_path / "broken-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}')
    (tmp_path / "broken.yaml").write_text(
        "name: broken\ntargets:\n  - name: t\n    model: ./broken-model\n    hardware: cpu\n"
        "    chat_template: false\n    methods:\n      - method: baseline\n"
        "datasets:\n  - name: humaneval\n    kind: humaneval\n    limit: 1\n"
        "sampling:\n  max_tokens: 4\n"
    )
    run = api.run(tmp_path / "broken.yaml", out=tmp_path / "results")
    s = api.load_summary(run)
    assert s.groups and all(g.status == "failed" for g in s.groups)
    code, out = _gate(str(run), "--baseline", str(two_seeds[0]))
    assert code == 3, out
