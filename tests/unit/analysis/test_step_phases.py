"""The drafter's share of a step (issue 52) from hand-built timed steps: prefill steps left out, verification
and drafting each from their own timers, the untimed rest, the share, the KV tokens lost; the patch's timers
on a stand-in runner class; the section and figure rendered from the rows."""

from __future__ import annotations

import types

import pytest
from support.factories import cell_record, group, run_summary

from specbench.analysis.step_phases import step_share, step_shares
from specbench.engines.vllm_patches import _patch_step_phases, take_step_phases
from specbench.report.plots_deployment import step_share_figure
from specbench.report.step_share_section import step_share_section
from specbench.results.parts import SummaryExtra
from specbench.results.records import CellRecord, StepPhases
from specbench.stats import Estimate

MS = 1e-3


def _phases(rows):
    return StepPhases.from_rows(rows)


# forward, sample, bookkeeping, draft, step, tokens, requests (K = 3, batch 1)
STEPS = [(30 * MS, 1 * MS, 1 * MS, 2 * MS, 35 * MS, 40, 1),  # a prefill: 40 tokens for one request
         (4 * MS, 0.5 * MS, 0.5 * MS, 2 * MS, 7.2 * MS, 4, 1),
         (4 * MS, 0.5 * MS, 0.5 * MS, 1 * MS, 6.1 * MS, 4, 1),
         (4 * MS, 0.5 * MS, 0.5 * MS, 3 * MS, 8.3 * MS, 4, 1)]


def test_decoding_steps_split_into_timed_verification_and_drafting():
    cells = [cell_record("c1", step_phases=_phases(STEPS[:2])), cell_record("c2", step_phases=_phases(STEPS[2:]))]
    row = step_share("g", "t", "d", 0.0, "eagle3", 3, 1, cells, engine_step_s=Estimate(value=0.008, ci_low=0.007,
                     ci_high=0.009, n=3), draft_weights_mib=6.5, kv_cache_tokens=900, baseline_kv_tokens=1000)
    assert row is not None and (row.steps, row.prefill_steps) == (3, 1)
    assert row.verification_ms.value == pytest.approx(5.0)
    assert row.draft_ms.value == pytest.approx(2.0)
    assert row.step_ms.value == pytest.approx((7.2 + 6.1 + 8.3) / 3)
    assert row.untimed_ms.value == pytest.approx(((7.2 - 7) + (6.1 - 6) + (8.3 - 8)) / 3)
    assert row.draft_share.value == pytest.approx(6 / (7.2 + 6.1 + 8.3))
    assert row.draft_share.ci_low <= row.draft_share.value <= row.draft_share.ci_high
    assert row.engine_step_ms.value == pytest.approx(8.0) and row.engine_step_ms.ci_high == pytest.approx(9.0)
    assert row.kv_tokens_lost == pytest.approx(0.1) and row.verification_ms.n == 3


def test_untimed_groups_have_no_row_and_a_baseline_sets_the_kv_reference():
    assert step_share("g", "t", "d", 0.0, "eagle3", 3, 1, [cell_record("c")]) is None
    base, eagle = group("baseline", k=None), group("eagle3", k=3)
    no_draft = [(4 * MS, 0.5 * MS, 0.5 * MS, 0.0, 5.1 * MS, 1, 1)] * 3
    cells_of = {base.group_id: [cell_record("b", engine_key="eb", step_phases=_phases(no_draft))],
                eagle.group_id: [cell_record("e", engine_key="ee", step_phases=_phases(STEPS))]}
    rows = step_shares([base, eagle], cells_of, {"eb": (None, 1000), "ee": (6.5, 800)})
    assert [(r.method, r.steps) for r in rows] == [("baseline", 3), ("eagle3", 3)]
    assert rows[0].kv_tokens_lost == 0.0 and rows[1].kv_tokens_lost == pytest.approx(0.2)
    assert rows[0].draft_share.value == 0.0 and rows[1].draft_weights_mib == 6.5


def test_step_phases_concatenate_over_rounds_and_are_not_stored_when_absent():
    a, b = _phases(STEPS[:1]), _phases(STEPS[1:])
    assert (a + b).steps == 4 and (a + b).tokens == [40, 4, 4, 4]
    assert "step_phases" not in cell_record("c").model_dump()
    back = CellRecord.model_validate(cell_record("c", step_phases=a).model_dump())
    assert back.step_phases == a


def test_the_patch_times_each_phase_of_a_runners_step():
    """The timers on a stand-in runner class with vLLM's method names (the wrapping, not vLLM)."""
    import time

    class Runner:
        def execute_model(self, scheduler_output):
            time.sleep(0.004)

        def _sample(self):
            time.sleep(0.001)

        def _update_states_after_model_execute(self):
            pass

        def _bookkeeping_sync(self):
            time.sleep(0.001)

        def propose_draft_token_ids(self):
            time.sleep(0.002)

        def sample_tokens(self):
            self._sample()
            self._update_states_after_model_execute()
            self._bookkeeping_sync()
            self.propose_draft_token_ids()

    mod = types.ModuleType("stand_in_runner")
    mod.CPUModelRunner = Runner
    _patch_step_phases(mod)
    r = Runner()
    for _ in range(2):
        r.execute_model(types.SimpleNamespace(total_num_scheduled_tokens=4, num_scheduled_tokens={"a": 4}))
        r.sample_tokens()
    rows = mod._specbench_step_phases
    assert len(rows) == 2 and all(len(x) == 7 for x in rows)
    fwd, sample, book, draft, step, tokens, reqs = rows[0]
    assert (tokens, reqs) == (4, 1)
    assert fwd >= 0.004 and sample >= 0.001 and book >= 0.001 and draft >= 0.002
    assert fwd + sample + book + draft <= step < fwd + sample + book + draft + 0.002
    assert take_step_phases() is None  # not installed in this process (vLLM's runner module not patched here)


def test_the_section_and_figure_show_every_timed_group():
    base, eagle = group("baseline", k=None), group("eagle3", k=3)
    rows = step_shares([base, eagle], {base.group_id: [cell_record("b", step_phases=_phases(STEPS[1:]))],
                                       eagle.group_id: [cell_record("e", step_phases=_phases(STEPS))]}, {})
    summary = run_summary([base, eagle], extra=SummaryExtra(step_shares=rows))
    sec = step_share_section(summary)
    assert sec is not None and sec.anchor == "step-share"
    table = sec.blocks[1].blocks[0]
    assert [r[2] for r in table.rows] == ["baseline", "eagle3"] and table.rows[1][5] == "3"
    png = step_share_figure(summary, {"eagle3": "#123456"})
    assert png is not None and png[:4] == b"\x89PNG"
    assert step_share_section(run_summary([base])) is None


def test_the_compact_summary_and_the_frame_carry_the_drafters_rows():
    from specbench.frames import step_share_frame
    from specbench.report.compact import render_compact

    base, eagle = group("baseline", k=None), group("eagle3", k=3)
    rows = step_shares([base, eagle], {base.group_id: [cell_record("b", step_phases=_phases(STEPS[1:]))],
                                       eagle.group_id: [cell_record("e", step_phases=_phases(STEPS))]},
                       {"e": (6.5, 800)})
    summary = run_summary([base, eagle], extra=SummaryExtra(step_shares=rows))
    text = render_compact(summary)
    assert "## The drafter's share of a step" in text and "| t | d | 0 | eagle3 | 3 | 1 |" in text and "6.50" in text
    frame = step_share_frame(summary)
    assert list(frame["method"]) == ["baseline", "eagle3"] and frame.loc[1, "draft_ms"] == pytest.approx(2.0)
    assert frame.loc[1, "draft_share_n"] == 3 and frame.loc[1, "draft_weights_mib"] == 6.5
