"""A run reads its suite once, into a plan; ``--resume`` takes the stored suite and refuses changed data (issue 33).

Whole ``specbench run`` commands, in this process, against an attached vLLM-like server (the
streaming fake of ``tests/support/fake_server.py``): planning, the manifest, the runner, the analysis and the
reports run for real, in seconds, with no engine to start.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.fake_server import FakeServer
from support.paths import SUITES
from typer.testing import CliRunner

from specbench import api
from specbench.cli import app
from specbench.config import plan as plan_module
from specbench.config import suite as suite_module
from specbench.config.suite import Suite, load_suite
from specbench.results import rundir

SUITE = """
name: attached
targets:
  - name: srv
    engine: vllm-server
    base_url: {url}
    model: fake-model
    chat_template: false
    methods:
      - method: ngram
        num_speculative_tokens: 3
datasets:
  - name: d
    kind: jsonl
    path: data.jsonl
sampling:
  max_tokens: {max_tokens}
load:
  batch_sizes: [1, 2]
warmup: false
"""
DATA = "".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(3))
LAST_CELL = "srv/ngram/d/T0/b2/r0"


@contextlib.contextmanager
def counting_suite_reads() -> Iterator[dict[str, int]]:
    """Count every ``load_suite`` and ``expand`` call made while inside, whichever module calls them."""
    counts = {"load_suite": 0, "expand": 0}
    originals = {"load_suite": suite_module.load_suite, "expand": plan_module.expand}

    def counted(name: str, f):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            counts[name] += 1
            return f(*args, **kwargs)
        return wrapper

    patched = []
    for mod in [m for name, m in sys.modules.items() if name.startswith("specbench") and m is not None]:
        for name, f in originals.items():
            if getattr(mod, name, None) is f:
                setattr(mod, name, counted(name, f))
                patched.append((mod, name, f))
    try:
        yield counts
    finally:
        for mod, name, f in patched:
            setattr(mod, name, f)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    with FakeServer() as srv:
        yield srv


def _suite(tmp_path: Path, srv: FakeServer, max_tokens: int = 8) -> Path:
    (tmp_path / "data.jsonl").write_text(DATA)
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.format(url=srv.url, max_tokens=max_tokens))
    return path


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["run", *args])


def _stopped_before_the_last_cell(run_dir: Path) -> None:
    """The run as a stop before its last cell leaves it: that cell's records gone, the manifest says so."""
    for name in (rundir.CELLS, rundir.RECORDS):
        rows = [o for o in rundir.iter_jsonl(run_dir / name) if o["cell_id"] != LAST_CELL]
        (run_dir / name).write_text("".join(json.dumps(o) + "\n" for o in rows))
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    rundir.write_json(run_dir / rundir.MANIFEST, {**manifest, "status": "interrupted", "interrupted_by": "SIGINT"})


def test_a_run_loads_and_expands_its_suite_once(server: FakeServer, tmp_path: Path) -> None:
    suite = _suite(tmp_path, server)
    with counting_suite_reads() as counts:
        res = _run(str(suite), "--out", str(tmp_path / "out"), "--no-report")
    assert res.exit_code == 0, res.output
    assert counts == {"load_suite": 1, "expand": 1}, counts
    assert "results:" in res.output and "time:" in res.output  # the whole command ran: records, summary
    with counting_suite_reads() as counts:
        res = _run(str(suite), "--dry-run", "--num-speculative-tokens", "1,2")
    assert res.exit_code == 0, res.output
    assert counts == {"load_suite": 1, "expand": 1}, counts


def test_a_resumed_run_decides_from_the_stored_suite_not_the_edited_yaml(server: FakeServer, tmp_path: Path) -> None:
    suite = _suite(tmp_path, server, max_tokens=8)
    res = _run(str(suite), "--out", str(tmp_path / "out"), "--no-report")
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp_path / "out" / "attached").iterdir()
    _stopped_before_the_last_cell(run_dir)
    # Edited after the stop: fewer tokens, another load, a dataset that does not exist. None of it counts.
    suite.write_text(SUITE.format(url=server.url, max_tokens=3).replace("[1, 2]", "[1, 2, 4]")
                     .replace("path: data.jsonl", "path: gone.jsonl"))
    with counting_suite_reads() as counts:
        res = _run(str(suite), "--out", str(tmp_path / "out"), "--no-report", "--resume", str(run_dir))
    assert res.exit_code == 0, res.output
    assert counts == {"load_suite": 0, "expand": 0}, counts  # the stored suite and plan
    redone = [r for r in rundir.read_requests(run_dir) if r.cell_id == LAST_CELL]
    assert len(redone) == 3 and {len(r.output_token_ids) for r in redone} == {8}, redone
    assert {c.cell_id for c in rundir.read_cells(run_dir)} == {"srv/ngram/d/T0/b1/r0", LAST_CELL}
    manifest = rundir.read_manifest(run_dir)
    assert manifest.status == "complete" and len(manifest.resumed_at) == 1
    assert manifest.suite is not None and manifest.suite.sampling.max_tokens == 8


def test_a_resume_refuses_data_whose_sha256_changed(server: FakeServer, tmp_path: Path) -> None:
    suite = _suite(tmp_path, server)
    res = _run(str(suite), "--out", str(tmp_path / "out"), "--no-report")
    assert res.exit_code == 0, res.output
    (run_dir,) = (tmp_path / "out" / "attached").iterdir()
    _stopped_before_the_last_cell(run_dir)
    recorded = rundir.read_manifest(run_dir).datasets["d"]
    assert recorded.source == "file" and recorded.sha256 is not None and len(recorded.sha256) == 64
    (tmp_path / "data.jsonl").write_text(DATA.replace("question 2", "question two"))
    before = (len(server.requests), (run_dir / rundir.RECORDS).read_bytes(), (run_dir / rundir.MANIFEST).read_bytes())
    res = _run(str(suite), "--out", str(tmp_path / "out"), "--no-report", "--resume", str(run_dir))
    assert res.exit_code == 2, res.output
    assert f"{run_dir}: cannot resume: dataset 'd'" in res.output and "changed since the run started" in res.output
    # Refused before anything ran or was written.
    after = (len(server.requests), (run_dir / rundir.RECORDS).read_bytes(), (run_dir / rundir.MANIFEST).read_bytes())
    assert after == before
    (tmp_path / "data.jsonl").unlink()
    res = _run(str(suite), "--out", str(tmp_path / "out"), "--no-report", "--resume", str(run_dir))
    assert res.exit_code == 2 and "cannot be read now" in res.output, res.output


def test_resume_plan_reads_a_manifest_without_a_stored_suite_from_its_file(tmp_path: Path) -> None:
    """A manifest written before it kept its suite: the file it names is read, once, and the run stores it."""
    (tmp_path / "data.jsonl").write_text(DATA)
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.format(url="http://127.0.0.1:9", max_tokens=5))
    planned = api.plan(path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rundir.write_json(run_dir / rundir.MANIFEST, {
        "schema_version": 2, "run_id": "r", "suite_name": "attached", "suite_path": str(path),
        "plan": planned.plan.model_dump(mode="json"),
    })
    resumed = api.resume_plan(run_dir)
    assert resumed.resume == run_dir and resumed.plan.cells == planned.plan.cells
    assert resumed.plan.decisions() == planned.plan.decisions()
    assert resumed.sources["d"]["sha256"] == api.resume_plan(run_dir).sources["d"]["sha256"]
    rundir.write_json(run_dir / rundir.MANIFEST, {"schema_version": 2, "run_id": "r", "suite_name": "attached"})
    with pytest.raises(api.SpecbenchError, match="stores no suite"):
        api.resume_plan(run_dir)


@pytest.mark.parametrize("path", sorted(SUITES.glob("*.yaml")),
                         ids=lambda p: p.name)
def test_a_stored_suite_decides_as_its_file_did(path: Path) -> None:
    """What the manifest stores (``suite.model_dump``) gives the same plan and decisions as the file."""
    suite = load_suite(path)
    stored = Suite.model_validate(json.loads(json.dumps(suite.model_dump(mode="json"))))
    stored.source_path = suite.source_path
    assert plan_module.expand(stored) == plan_module.expand(suite)
