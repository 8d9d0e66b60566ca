"""specbench.load on a real cpu-smoke run: the DataFrames hold the raw records and the summary's numbers."""

from __future__ import annotations

import math

import specbench
from specbench.analysis import metrics
from specbench.results import rundir


def test_load_gives_requests_cells_and_groups(smoke_run):
    run_dir, s = smoke_run
    run = specbench.load(run_dir)
    records = metrics.unique_requests(rundir.read_requests(run_dir))
    assert len(run.requests) == len(records) > 0
    assert set(run.cells.cell_id) == {c.cell_id for c in run.manifest.plan.cells}
    assert list(run.groups.group_id) == [g.group_id for g in s.groups]
    for g in s.groups:
        row = run.groups.set_index("group_id").loc[g.group_id]
        if g.tau is not None and g.tau.value is not None:
            assert row["tau"] == g.tau.value and row["tau_lo"] == g.tau.ci_low and row["tau_n"] == g.tau.n
    # per-request τ in the frame recomputes the group's pooled τ from the raw counters
    eagle = run.requests[(run.requests.method == "eagle3") & (run.requests.temperature == 0)
                         & (run.requests.target == "tiny")]
    for dataset, rows in eagle.groupby("dataset"):
        g = next(g for g in s.find(target="tiny", method="eagle3") if g.dataset == dataset and g.temperature == 0)
        pooled = 1 + rows.num_accepted_tokens.sum() / rows.num_drafts.sum()
        assert math.isclose(pooled, g.tau.value, rel_tol=1e-9), dataset
    skipped = run.cells[run.cells.method == "dspark"]
    assert set(skipped[skipped.target == "tiny"].status) == {"skipped"}
