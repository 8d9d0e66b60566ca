"""The run directory's JSONL files (specbench.results.rundir): one reader and one appender for records,
cells, datasets and equivalence rows; a torn last line (an interrupted write) is dropped, said and cut before
the next append; a bad line in the middle is an error with its file and line."""

import json

import pytest
from support.factories import request

from specbench.config.plan import expand
from specbench.config.suite import load_suite
from specbench.results import rundir

#: One baseline cell is all a hand-made run needs.
SUITE = """name: t
targets: [{name: a, model: some/model, methods: [{method: baseline}]}]
datasets: [{name: h, kind: humaneval}]
"""


def test_appender_survives_torn_line(tmp_path):
    path = tmp_path / "records.jsonl"
    rec = request("c", "p", tokens=[1], prompt_tokens=1, output_text="x")
    w = rundir.JsonlAppender(path)
    w.append(rec)
    w.close()
    with open(path, "a") as fh:
        fh.write('{"run_id": "r", "cell_')  # interrupted mid-write
    assert len(list(rundir.iter_jsonl(path))) == 1  # the torn tail is ignored on read
    w = rundir.JsonlAppender(path)  # … and cut before appending again
    w.append(rec)
    w.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(ln)["prompt_id"] == "p" for ln in lines)


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(rundir.StoreError, match="records.jsonl:2"):
        list(rundir.iter_jsonl(path))


def _hand_made_run(tmp_path):
    """A run directory written by hand: manifest, one finished baseline cell, records with a torn last line."""
    p = tmp_path / "s.yaml"
    p.write_text(SUITE)
    suite = load_suite(p)
    plan = expand(suite)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rundir.write_json(run_dir / rundir.MANIFEST, {"run_id": "r", "suite_name": suite.name,
                                                 "suite": suite.model_dump(mode="json"),
                                                 "plan": plan.model_dump(mode="json")})
    cell = plan.cells[0]
    recs = rundir.JsonlAppender(run_dir / rundir.RECORDS)
    for i in range(3):
        recs.append(request(cell, f"p{i}", tokens=[1, 2, 3], prompt_tokens=4, output_text="abc", latency_s=0.1))
    recs.close()
    cells = rundir.JsonlAppender(run_dir / rundir.CELLS)
    cells.append({"run_id": "r", "cell_id": cell.cell_id, "engine_key": cell.engine_key, "status": "ok",
                  "num_requests": 4, "wall_time_s": 1.0})
    cells.close()
    with open(run_dir / rundir.RECORDS, "a") as fh:
        fh.write('{"run_id": "r", "cell_id": "' + cell.cell_id + '", "prompt_')  # killed mid-write
    return run_dir


def test_analyze_says_a_torn_last_line_was_dropped(tmp_path):
    from typer.testing import CliRunner

    from specbench import api
    from specbench.cli import app
    from specbench.report.markdown import render_markdown

    run_dir = _hand_made_run(tmp_path)
    size = len((run_dir / rundir.RECORDS).read_bytes().rsplit(b"\n", 1)[1])
    torn: list[str] = []
    assert len(rundir.read_requests(run_dir, torn)) == 3
    assert torn == [f"records.jsonl:4: torn last line ({size} bytes, an interrupted write) ignored"]
    summary = api.analyze(run_dir)
    assert summary.extra.torn_lines == torn
    assert sum(g.n_requests for g in summary.groups) == 3
    note = "1 torn last line of an interrupted write ignored: records.jsonl:4"
    assert note in render_markdown(summary)
    result = CliRunner().invoke(app, ["analyze", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert note in " ".join(result.output.split())
    # Resuming cuts the torn line; the next analyze has nothing to say.
    rundir.JsonlAppender(run_dir / rundir.RECORDS).close()
    assert "torn_lines" not in api.analyze(run_dir).extra


def test_whole_last_line_without_newline_is_kept_by_reader_and_appender(tmp_path):
    path = tmp_path / "cells.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}')
    torn: list[str] = []
    assert [o["a"] for o in rundir.iter_jsonl(path, torn)] == [1, 2] and torn == []
    w = rundir.JsonlAppender(path)
    w.append({"a": 3})
    w.close()
    assert [o["a"] for o in rundir.iter_jsonl(path)] == [1, 2, 3]


def test_other_jsonl_files_go_through_the_one_reader(tmp_path):
    """Datasets (strict, gzip) and equivalence.jsonl (torn tail said, repaired on append) use rundir.iter_jsonl."""
    import gzip

    from specbench.datasets import DatasetError, read_jsonl

    data = tmp_path / "d.jsonl.gz"
    with gzip.open(data, "wt") as fh:
        fh.write('{"prompt": "a"}\n{"prompt": "b"}')
    assert [r["prompt"] for r in read_jsonl(data)] == ["a", "b"]
    bad = tmp_path / "d.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": ')
    with pytest.raises(DatasetError, match="d.jsonl:2"):
        read_jsonl(bad)
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl")

    eq = tmp_path / rundir.EQUIVALENCE
    _append_rows(eq, [{"cell_id": "c", "prompt_id": "p", "f_minus": [0.5], "p": [0.25]}])
    with open(eq, "a") as fh:
        fh.write('{"cell_id": "c", "pro')
    torn: list[str] = []
    assert len(rundir.read_equivalence_rows(tmp_path, torn)) == 1
    assert torn and torn[0].startswith("equivalence.jsonl:2: torn last line")
    _append_rows(eq, [{"cell_id": "c", "prompt_id": "q", "sample_index": 1, "error": "boom"}])
    rows = rundir.read_equivalence_rows(tmp_path)
    assert [r.prompt_id for r in rows] == ["p", "q"]
    assert [(r.request_key, r.scored) for r in rows] == [(("c", "p", 0), True), (("c", "q", 1), False)]


def test_equivalence_rows_are_typed_and_read_back_as_written(tmp_path):
    """Every shape of row a run writes (a scored request, an unscored one, a target's error) reads back as the
    ScoreRow it was, and writes back byte for byte; a row that is no such row is an error with its file."""
    from specbench.results.requests import ScoreRow

    rows = [ScoreRow(cell_id="c", prompt_id="p", sample_index=0, repeat=0, temperature=1.0, top_p=1.0,
                     order="probability", scorer="s", f_minus=[0.1, 0.2], p=[0.5, 0.25]),
            ScoreRow(cell_id="c", prompt_id="q", sample_index=2, repeat=0, temperature=1.0, top_p=1.0,
                     order="probability", scorer="s", error="too long"),
            ScoreRow(target="t", error="engine did not start")]
    _append_rows(tmp_path / rundir.EQUIVALENCE, [r.stored() for r in rows])
    back = rundir.read_equivalence_rows(tmp_path)
    assert back == rows and [r.stored() for r in back] == [r.stored() for r in rows]
    assert [r.request_key for r in back] == [("c", "p", 0), ("c", "q", 2), None]
    assert rundir.read_equivalence_rows(tmp_path / "none") == []
    (tmp_path / rundir.EQUIVALENCE).write_text('{"cell_id": "c", "u": [0.5]}\n')
    with pytest.raises(rundir.StoreError, match="equivalence.jsonl: not an equivalence row"):
        rundir.read_equivalence_rows(tmp_path)


def _append_rows(path, rows):
    from specbench.results.rundir import JsonlAppender

    out = JsonlAppender(path)
    for row in rows:
        out.append(row)
    out.close()
