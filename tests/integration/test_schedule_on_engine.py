"""A method run with a dynamic-speculation schedule on real vLLM (issue 37): vLLM picks K by the
requests in each step, and the run's schedule check sees it from the per-request metrics.

One offline engine (EAGLE-3 of the trained zoo, ``schedule: [[1, 1, 3], [2, 4, 1]]``) at batch
sizes 1 and 4: at batch 1 every step drafts 3; at batch 4 the steps with two or more requests
running draft 1 and those a lone request finishes alone draft 3, as the schedule says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SUITE = """
name: schedule-on-engine
targets:
  - name: tiny
    model: tiny
    assets: trained
    dtype: float32
    max_model_len: 512
    hardware: cpu
    engine_patches: [vllm-cpu-expand-float]
    methods:
      - name: eagle3-scheduled
        method: eagle3
        speculator: tiny:eagle3
        num_speculative_tokens: 3
        schedule: [[1, 1, 3], [2, 4, 1]]
datasets:
  - name: humaneval
    kind: humaneval
    limit: 4
sampling:
  temperatures: [0.0]
  max_tokens: 24
  seed: 0
load:
  batch_sizes: [1, 4]
"""


def test_vllm_drafts_what_the_schedule_gives_each_steps_batch_size(tmp_path: Path) -> None:
    from specbench import api
    from specbench.results.schedule_file import read_schedule, schedule_path

    suite = tmp_path / "schedule.yaml"
    suite.write_text(SUITE)
    run_dir = api.run(suite, out=tmp_path / "results")
    summary = api.load_summary(run_dir)
    assert [[list(e) for e in g.schedule or []] for g in summary.groups] == [[[1, 1, 3], [2, 4, 1]]] * 2
    # the run wrote its schedule file (a method ran with a schedule), and the report shows its check
    sf = read_schedule(schedule_path(run_dir))
    checks = {c.batch_size: c for c in sf.checks}
    assert sorted(checks) == [1, 4], sf.checks
    b1, b4 = checks[1], checks[4]
    assert b1.k_share == {3: 1.0} and b1.drafted_per_step == pytest.approx(3.0), b1
    assert b1.k_share_expected == {3: 1.0}
    # batch 4: mostly K = 1 (two or more running); K = 3 only where one request runs alone
    assert b4.k_share.get(1, 0.0) > 0.5 and set(b4.k_share) <= {1, 3}, b4
    assert b4.drafted_per_step == pytest.approx(b4.drafted_per_step_expected, abs=0.15), b4
    paths = api.report(run_dir, tmp_path / "reports")
    text = paths["markdown"].read_text()
    assert "The schedule on the engine, per load" in text and "[[1, 1, 3], [2, 4, 1]]" in text
