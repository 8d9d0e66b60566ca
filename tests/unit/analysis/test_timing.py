"""Where a run's time goes: breakdown() on hand-built spans, the recorder, the report section."""

from __future__ import annotations

import pytest
from support.paths import RECORDED

from specbench.analysis.timing import Span, breakdown, fmt_duration
from specbench.execution.timeline import Timeline
from specbench.report.terminal import time_line


def sp(phase: str, start: float, end: float, engine: str | None = None, groups: list[str] | None = None,
       gpus: int | None = None) -> Span:
    return Span(phase=phase, start=start, end=end, engine=engine, groups=groups, gpus=gpus)  # type: ignore[arg-type]


def sequential() -> list[Span]:
    """One engine A (start 0-20, warmup 20-25, two groups' cells 25-35 and 35-45), teacher forcing 45-60,
    scoring 60-62, analysis 62-63, reports 63-65; the run's wall is 70 s (5 s unaccounted)."""
    return [
        sp("engine_start", 0, 20, "A", gpus=1), sp("warmup", 20, 25, "A", gpus=1),
        sp("cells", 25, 35, "A", ["g1"], gpus=1), sp("cells", 35, 45, "A", ["g2"], gpus=1),
        sp("teacher_forcing", 45, 60, "A--teacher-forcing", gpus=1),
        sp("scoring", 60, 62), sp("analysis", 62, 63), sp("reports", 63, 65),
    ]


def test_sequential_walls_shares_and_harness() -> None:
    bd = breakdown(sequential(), 70.0)
    walls = {p.phase: p.wall_s for p in bd.phases}
    assert walls == {"assets": 0, "cells": 20, "teacher_forcing": 15, "warmup": 5, "engine_start": 20, "scoring": 2,
                     "analysis": 1, "reports": 2, "other": 0, "unaccounted": 5}
    assert sum(walls.values()) == pytest.approx(70)
    assert bd.unaccounted_s == 5 and bd.overlap_s == 0
    # harness: everything but engine starts and cells, the unaccounted remainder included
    assert bd.harness_s == pytest.approx(70 - 20 - 20) and bd.harness_share == pytest.approx(30 / 70, abs=1e-4)
    assert bd.phase("cells").share == pytest.approx(20 / 70, abs=1e-4)


def test_engine_and_group_seconds() -> None:
    bd = breakdown(sequential(), 70.0)
    eng = {e.engine: e for e in bd.engines}
    assert eng["A"].engine_s == 45 and eng["A"].gpu_s == 45
    assert eng["A"].by_phase == {"cells": 20, "warmup": 5, "engine_start": 20}
    assert eng["A--teacher-forcing"].engine_s == 15
    groups = {g.group_id: g for g in bd.groups}
    # equal cell time: each group carries half of A's start and warmup
    assert groups["g1"].cells_s == 10 and groups["g1"].overhead_s == 12.5 and groups["g1"].engine_s == 22.5
    assert groups["g2"].engine_s == 22.5 and groups["g1"].gpu_s == 22.5 and groups["g1"].engines == ["A"]


def test_group_overhead_in_proportion_to_cell_time() -> None:
    spans = [sp("engine_start", 0, 30, "A"), sp("cells", 30, 40, "A", ["g1"]), sp("cells", 40, 70, "A", ["g2"])]
    groups = {g.group_id: g for g in breakdown(spans, 70).groups}
    assert groups["g1"].overhead_s == pytest.approx(7.5) and groups["g2"].overhead_s == pytest.approx(22.5)
    assert groups["g1"].gpu_s is None  # no GPU count given: no GPU-seconds


def test_overlap_counts_once_in_wall_and_twice_in_engine_seconds() -> None:
    """Two executors: engine B starts (10-40) while A's cells run (10-30); then B's cells (40-50)."""
    spans = [
        sp("engine_start", 0, 10, "A", gpus=1), sp("cells", 10, 30, "A", ["a"], gpus=1),
        sp("engine_start", 10, 40, "B", gpus=2), sp("cells", 40, 50, "B", ["b"], gpus=2),
    ]
    bd = breakdown(spans, 50)
    walls = {p.phase: p.wall_s for p in bd.phases}
    # 10-30 both run: the wall goes to the cells; B's start shows only where nothing else ran (30-40)
    assert walls["cells"] == 30 and walls["engine_start"] == 20 and walls["unaccounted"] == 0
    assert sum(walls.values()) == pytest.approx(50) and bd.overlap_s == 20
    assert bd.phase("engine_start").busy_s == 40 and bd.phase("engine_start").engine_s == 40
    assert bd.phase("engine_start").gpu_s == 10 + 60
    eng = {e.engine: e for e in bd.engines}
    assert eng["A"].engine_s == 30 and eng["B"].engine_s == 40 and eng["B"].gpu_s == 80
    assert sum(e.engine_s for e in bd.engines) == 70 > bd.wall_s
    assert bd.harness_s == 0


def test_two_engines_starting_at_once_share_one_wall() -> None:
    spans = [sp("engine_start", 0, 60, "A"), sp("engine_start", 0, 60, "B"), sp("cells", 60, 70, "A", ["a"])]
    bd = breakdown(spans, 80)
    assert bd.wall_of("engine_start") == 60 and bd.phase("engine_start").engine_s == 120
    assert bd.unaccounted_s == 10 and bd.harness_s == 10


def test_one_engines_spans_touching_are_no_overlap() -> None:
    """Estimated cell spans of one engine may overlap by a rounding second: not two engines at once."""
    bd = breakdown([sp("cells", 0, 10.5, "A", ["a"]), sp("cells", 10, 20, "A", ["b"])], 20)
    assert bd.overlap_s == 0 and bd.wall_of("cells") == 20


def test_spans_beyond_the_wall_are_scaled_into_it() -> None:
    bd = breakdown([sp("cells", 0, 10), sp("scoring", 10, 20)], 10)
    assert sum(p.wall_s for p in bd.phases) == pytest.approx(10) and bd.unaccounted_s == 0


def test_empty() -> None:
    bd = breakdown([], 12.0)
    assert bd.unaccounted_s == 12 and bd.harness_s == 12 and bd.harness_share == 1 and bd.groups == []
    assert breakdown([], 0).harness_share == 0


def test_spans_from_the_jobs_phases() -> None:
    """Cells phases split by their cells' wall times (a restart: two cells phases of one job), teacher
    forcing shared by its groups, 0 GPUs is none."""
    from specbench.analysis.timing import spans_from_phases
    from specbench.execution.jobs import PhaseTimed
    from specbench.results.records import CellRecord

    t0 = 1_780_000_000.0

    def rec(cid: str, wall: float, end: float, status: str = "ok") -> CellRecord:
        return CellRecord(run_id="r", cell_id=cid, engine_key="A", status=status, wall_time_s=wall,
                          finished_at=_iso(t0 + end))

    phases = [
        PhaseTimed(job_id="A", phase="engine_start", start=t0, end=t0 + 10, gpus=2),
        PhaseTimed(job_id="A", phase="cells", start=t0 + 10, end=t0 + 40, gpus=2),  # c1 (10 s), c2 (5 s): 2 to 1
        PhaseTimed(job_id="A", phase="engine_start", start=t0 + 40, end=t0 + 50, gpus=2),  # restarted
        PhaseTimed(job_id="A", phase="cells", start=t0 + 50, end=t0 + 60, gpus=2),  # c3
        PhaseTimed(job_id="tiny--teacher-forcing", phase="teacher_forcing", start=t0 + 60, end=t0 + 70),
    ]
    records = [rec("c1", 10, 25), rec("c2", 5, 39), rec("c9", 3, 40, "failed"), rec("c3", 8, 60)]
    spans = spans_from_phases(phases, records, {"c1": "g1", "c2": "g2", "c3": "g1"},
                              {"tiny--teacher-forcing": ["g2", "g3"]})
    tf_start = PhaseTimed(job_id="tiny--teacher-forcing", phase="engine_start", start=t0 + 55, end=t0 + 60)
    tf = spans_from_phases([tf_start], [], {}, {"tiny--teacher-forcing": ["g2"]}, ["tiny--teacher-forcing"])
    assert [(s.phase, s.groups) for s in tf] == [("teacher_forcing", ["g2"])]  # its own engine start: the harness's

    class Close:  # a phase the timing model does not name: "other", with its engine
        job_id, phase, start, end, gpus = "A", "engine_close", t0 + 70, t0 + 72, 0

    assert spans_from_phases([Close()], [], {})[0].model_dump(exclude_none=True) == {
        "phase": "other", "start": t0 + 70, "end": t0 + 72, "engine": "A"}
    got = [(s.phase, s.start - t0, s.end - t0, s.groups, s.gpus) for s in spans]
    assert got == [("engine_start", 0, 10, None, 2), ("cells", 10, 30, ["g1"], 2), ("cells", 30, 40, ["g2"], 2),
                   ("engine_start", 40, 50, None, 2), ("cells", 50, 60, ["g1"], 2),
                   ("teacher_forcing", 60, 70, ["g2", "g3"], None)]
    groups = {g.group_id: g for g in breakdown(spans, 70).groups}
    assert groups["g1"].cells_s == 30 and groups["g1"].overhead_s == pytest.approx(20 * 30 / 40)
    assert groups["g3"].engine_s == 5 and groups["g3"].engines == ["tiny--teacher-forcing"]


def test_timeline_records_spans_also_when_the_block_raises() -> None:
    tl = Timeline(started=100.0)
    with tl.span("scoring"):
        pass
    with pytest.raises(RuntimeError), tl.span("analysis", engine="x", gpus=2):
        raise RuntimeError
    s = tl.add("cells", 101, 103, engine="A", groups=["g"])
    assert [x.phase for x in tl.spans or []] == ["scoring", "analysis", "cells"] and s.seconds == 2
    assert tl.has("analysis") and not tl.has("reports")
    assert tl.spans[1].engine == "x" and tl.spans[1].gpus == 2  # type: ignore[index]
    back = [Span.model_validate(d) for d in tl.to_json()]
    assert back == tl.spans
    bd = tl.breakdown(end=110.0)
    assert bd.wall_s == 10 and bd.wall_of("cells") == 2


def test_breakdown_round_trips_through_the_manifest() -> None:
    from specbench.results.manifest import RunManifest

    bd = breakdown(sequential(), 70.0)
    m = RunManifest.load({"schema_version": 2, "run_id": "r", "suite_name": "s",
                          "time_breakdown": bd.model_dump(mode="json")})
    assert m.time_breakdown == bd
    assert RunManifest.load(m.stored()).time_breakdown == bd
    assert RunManifest.load({"schema_version": 2, "run_id": "r", "suite_name": "s"}).time_breakdown is None


def test_time_line() -> None:
    assert time_line(None) is None
    line = time_line(breakdown(sequential(), 70.0).model_dump(mode="json"))
    assert line.startswith("wall 1m10s: engine starts 20s (29 %), cells 20s (29 %), harness 30s (43 %): ")
    assert line.endswith("teacher forcing 15s, warmups 5.0s, unaccounted 5.0s, scoring 2.0s, reports 2.0s, analysis 1.0s")


@pytest.mark.parametrize(("s", "text"), [(0.42, "0.4s"), (48, "48s"), (130, "2m10s"), (3725, "1h02m")])
def test_fmt_duration(s: float, text: str) -> None:
    assert fmt_duration(s) == text


# --------------------------------------------------------------------------
# estimated from a run's files; recorded by api.run / api.report; shown in the reports


def _iso(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")


def _log_line(key: str, t: float) -> str:
    import datetime as dt

    stamp = dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%m-%d %H:%M:%S")
    return f"(specbench-engine-{key} pid=1) INFO {stamp} [core.py:402] init engine (profile, create kv cache) took 0.4 s\n"


def fake_run(tmp_path, t0: float = 1_780_000_000.0):  # type: ignore[no-untyped-def]
    """A run: created t0, prompts at +5; engine A up at +20, cells +30..+40, +40..+50; engine B up at +70,
    cell +80..+90; teacher forcing's engine up at +100, equivalence.jsonl at +120; summary at +130, reports +133."""
    import os

    from specbench.results import rundir
    from specbench.results.records import CellRecord

    run = tmp_path / "run"
    (run / "engines").mkdir(parents=True)
    cells = [("A", "tiny/a/d/T0/b1/r0", 30, 40), ("A", "tiny/a/d/T0.5/b1/r0", 40, 50), ("B", "tiny/b/d/T0/b1/r0", 80, 90)]
    recorded = rundir.read_manifest(RECORDED).plan
    assert recorded is not None and recorded.engines[0].target.name == "tiny"
    plan = {"suite_name": "s",
            "engines": [recorded.engines[0].model_copy(update={"key": k}).model_dump(mode="json") for k in ("A", "B")],
            "cells": [{"cell_id": cid, "engine_key": key, "target": "tiny", "method": cid.split("/")[1],
                       "method_kind": "ngram", "k": 3, "dataset": "d", "temperature": 0.5 if "T0.5" in cid else 0.0,
                       "batch_size": 1, "repeat": 0} for key, cid, _, _ in cells]}
    rundir.write_json(run / rundir.MANIFEST, {"schema_version": 2, "run_id": "r 1", "suite_name": "s", "platform": "cpu",
                                            "created_at": _iso(t0), "finished_at": _iso(t0 + 121), "plan": plan})
    with open(run / rundir.CELLS, "w") as fh:
        for key, cid, a, z in cells:
            fh.write(CellRecord(run_id="r", cell_id=cid, engine_key=key, status="ok", wall_time_s=z - a,
                                started_at=_iso(t0 + a), finished_at=_iso(t0 + z)).model_dump_json() + "\n")
    (run / "engines" / "A.log").write_text(_log_line("A", t0 + 20))
    (run / "engines" / "B.log").write_text("noise\n" + _log_line("B", t0 + 70))
    (run / "engines" / "tiny--teacher-forcing.log").write_text(_log_line("spare", t0 + 100))
    reports = tmp_path / "reports"
    reports.mkdir()
    for path, at in [(run / rundir.PROMPTS, 5), (run / "equivalence.jsonl", 120), (run / rundir.SUMMARY, 130),
                     (reports / "r_1.md", 133), (reports / "r_1.html", 132)]:
        path.write_text("{}\n")
        os.utime(path, (t0 + at, t0 + at))
    return run, reports


def test_estimate_from_a_runs_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from specbench.analysis.timing_estimate import run_spans

    run, reports = fake_run(tmp_path)
    spans, wall, notes = run_spans(run, reports)
    got = [(s.phase, s.engine, s.start - 1_780_000_000.0, s.end - 1_780_000_000.0) for s in spans]
    assert got == [
        ("cells", "A", 30, 40), ("cells", "A", 40, 50), ("cells", "B", 80, 90),
        ("engine_start", "A", 5, 20), ("warmup", "A", 20, 30),  # the first engine starts once the prompts are written
        ("engine_start", "B", 50, 70), ("warmup", "B", 70, 80),
        ("teacher_forcing", "tiny--teacher-forcing", 90, 120),
        ("analysis", None, 121, 130), ("reports", None, 130, 133),  # no scores.jsonl: no scoring span
    ]
    assert wall == 133 and notes
    assert spans[0].groups == ["tiny/a/d/T0/b1"] and spans[1].groups == ["tiny/a/d/T0.5/b1"]
    bd = breakdown(spans, wall)
    assert bd.wall_of("cells") == 30 and bd.wall_of("engine_start") == 35 and bd.wall_of("warmup") == 20
    assert bd.unaccounted_s == 5 + 1  # before the prompts, between teacher forcing and the analysis


def test_estimate_since_keeps_this_sessions_cells(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from specbench.analysis.timing_estimate import engine_spans

    run, _ = fake_run(tmp_path)
    spans = engine_spans(run, since=1_780_000_000.0 + 60)
    assert [(s.phase, s.engine) for s in spans] == [("cells", "B"), ("engine_start", "B"), ("warmup", "B"),
                                                    ("teacher_forcing", "tiny--teacher-forcing")]
    assert spans[1].start == 1_780_000_000.0 + 60  # from the session's start


def test_api_records_the_breakdown_and_the_reports_show_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On the recorded run: analysis and scoring recorded, the engine side estimated from cells.jsonl;
    api.report adds the reports; the Markdown and HTML reports have the section."""
    import json
    import shutil

    from specbench import api
    from specbench.analysis.timing import parse_time
    from specbench.report.html import render_html
    from specbench.report.markdown import render_markdown
    from specbench.results.manifest import RunManifest
    from specbench.results.summary import RunSummary

    recorded = RECORDED
    run = tmp_path / "results" / "recorded" / "run"
    shutil.copytree(recorded, run)
    created = parse_time(json.loads((run / "manifest.json").read_text())["created_at"])
    assert created is not None
    tl = Timeline(started=created)
    api.analyze(run, timeline=tl)
    assert [s.phase for s in tl.spans or []] == ["scoring", "analysis"]
    api.record_time_breakdown(run, tl)
    manifest = json.loads((run / "manifest.json").read_text())
    bd = manifest["time_breakdown"]
    phases = {p["phase"]: p for p in bd["phases"]}
    assert phases["cells"]["spans"] == 2 and phases["engine_start"]["spans"] == 2 and phases["analysis"]["spans"] == 1
    assert "estimated" in bd["notes"][0] and len(manifest["timeline"]) == len(tl.spans or [])
    summary = RunSummary.load(json.loads((run / "summary.json").read_text()))
    typed = RunManifest.load(manifest)
    text = render_markdown(summary, typed)
    assert "## Where the time went" in text and "the harness's own" in text
    assert "Writing these reports comes after this table" in text
    assert "Where the time went" in render_html(summary, typed, figures={})
    api.report(run, tmp_path / "reports", timeline=tl)
    after = json.loads((run / "manifest.json").read_text())["time_breakdown"]
    assert {p["phase"]: p for p in after["phases"]}["reports"]["spans"] == 1 and after["notes"] == bd["notes"]
    assert after["wall_s"] >= bd["wall_s"]
