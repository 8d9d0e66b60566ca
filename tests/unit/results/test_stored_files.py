"""One owner per run-directory file: results/ reads and writes them, typed, migrated on every read.

* During analyze, report, gate, history and frames, an audit hook on ``open`` sees every file of the
  run directory opened from code under ``specbench/results/`` (the first specbench frame of the stack).
* Every stored manifest fixture (one per schema version at least) loads into :class:`RunManifest`
  and is written back without losing a key.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.paths import FIXTURES, SUITES

import specbench
from specbench import api
from specbench.results import rundir
from specbench.results.manifest import RunManifest
from specbench.results.migrations import MANIFEST_SCHEMA_VERSION

PACKAGE = Path(specbench.__file__).resolve().parent
RESULTS = PACKAGE / "results"

# ---------------------------------------------------------------------------
# the audit hook: installed once (audit hooks cannot be removed), active only inside `watching`

_watch: dict[str, Any] = {"dir": None, "opens": []}


def _first_specbench_frame(frame: Any) -> str | None:
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(str(PACKAGE) + os.sep):
            return name
        frame = frame.f_back
    return None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or _watch["dir"] is None:
        return
    path = args[0]
    if not isinstance(path, (str, bytes, os.PathLike)):
        return  # a file descriptor
    p = os.path.abspath(os.fsdecode(path))
    if not p.startswith(_watch["dir"] + os.sep):
        return
    _watch["opens"].append((os.path.relpath(p, _watch["dir"]), _first_specbench_frame(sys._getframe(1))))


_installed: list[bool] = []


@contextlib.contextmanager
def watching(run_dir: Path) -> Iterator[list[tuple[str, str | None]]]:
    """(file relative to ``run_dir``, the file of the first specbench frame that opened it) of every open."""
    if not _installed:
        sys.addaudithook(_hook)
        _installed.append(True)
    opens: list[tuple[str, str | None]] = []
    _watch["dir"], _watch["opens"] = os.path.abspath(run_dir), opens
    try:
        yield opens
    finally:
        _watch["dir"] = None


def outside_results(opens: list[tuple[str, str | None]]) -> list[str]:
    return sorted({f"{f} opened from {os.path.relpath(w, PACKAGE.parent) if w else 'outside specbench'}"
                   for f, w in opens if w is None or not w.startswith(str(RESULTS) + os.sep)})


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """The recorded run (real records of the tiny zoo on vLLM, stored in tests/fixtures/recorded)."""
    d = tmp_path / "results" / "recorded" / "run"
    shutil.copytree(FIXTURES / "recorded", d)
    return d


def test_the_hook_sees_a_run_file_opened_outside_results(run: Path) -> None:
    """The check can fail: code under specbench/report/ reading the manifest itself is caught."""
    code = compile("open(path).read()", str(PACKAGE / "report" / "reader.py"), "exec")
    with watching(run) as opens:
        exec(code, {"path": run / rundir.MANIFEST})  # noqa: S102 - code whose frame says specbench/report/
        rundir.read_manifest(run)
    assert outside_results(opens) == ["manifest.json opened from specbench/report/reader.py"]
    assert sum(1 for f, _ in opens if f == rundir.MANIFEST) == 2


def test_analyze_report_gate_history_and_frames_open_run_files_only_through_results(run: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'history.db'}"
    with watching(run) as opens:
        summary = api.analyze(run)
        paths = api.report(run, tmp_path / "reports")
        gate = api.gate(run, str(run))  # against itself
        added = [r.added for r in api.history_add([run], db=db)]
        frames = specbench.load(run)
    assert outside_results(opens) == []
    # every command did read the run's files (the hook saw them)
    assert {rundir.MANIFEST, rundir.SUMMARY, rundir.RECORDS, rundir.CELLS, rundir.PROMPTS} <= {f for f, _ in opens}
    assert summary.groups and set(paths) >= {"markdown", "html"} and gate.exit_code == 0
    assert added == [True] and len(frames.requests) and frames.manifest.run_id == summary.run_id


def test_a_run_reads_its_summary_once(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the analysis writes it, the closing tables and the reports share one read of summary.json."""
    from specbench.cli import _print_summary
    from specbench.report import html

    monkeypatch.setattr(html, "make_figures", lambda summary: {})  # the figures read nothing: spare their time
    api.analyze(run)
    with watching(run) as opens:
        summary = api.load_summary(run)
        _print_summary(run, summary)
        api.report(run, tmp_path / "reports", summary=summary)
    assert [f for f, _ in opens].count(rundir.SUMMARY) == 1


# ---------------------------------------------------------------------------
# the stored manifests of every schema version


def _manifest_fixtures() -> list[Path]:
    return sorted([*FIXTURES.glob("manifest_*.json"), FIXTURES / "recorded" / "manifest.json",
                   *(FIXTURES / "schema").glob("manifest_v*.json")])


def _key_paths(x: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, value) of every key at every depth (list items by index)."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield at + (k,), v
            yield from _key_paths(v, at + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _key_paths(v, at + (i,))


def test_a_fixture_of_every_manifest_schema_version() -> None:
    versions = {int(p.name.split("_v")[1].split("_")[0]) for p in (FIXTURES / "schema").glob("manifest_v*.json")}
    assert versions == set(range(1, MANIFEST_SCHEMA_VERSION + 1)), "add tests/fixtures/schema/manifest_v<N>_*.json"
    for p in (FIXTURES / "schema").glob("manifest_v*.json"):
        v = int(p.name.split("_v")[1].split("_")[0])
        assert json.loads(p.read_text()).get("schema_version", 1) == v, p.name


@pytest.mark.parametrize("path", _manifest_fixtures(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_stored_manifest_loads_typed_and_saves_without_losing_a_key(path: Path, tmp_path: Path) -> None:
    from specbench.results.migrations import upgrade_manifest

    shutil.copy(path, tmp_path / rundir.MANIFEST)
    m = rundir.read_manifest(tmp_path)
    assert isinstance(m, RunManifest) and m.schema_version == MANIFEST_SCHEMA_VERSION and m.run_id
    rundir.write_manifest(tmp_path, m)
    saved = json.loads((tmp_path / rundir.MANIFEST).read_text())
    stored = upgrade_manifest(json.loads(path.read_text()))  # the file as the current version reads it
    got = dict(_key_paths(saved))
    lost = [k for k, _ in _key_paths(stored) if k not in got]
    assert lost == []
    changed = [k for k, v in _key_paths(stored) if got[k] != v or type(got[k]) is not type(v)]
    assert changed == []
    assert rundir.read_manifest(tmp_path) == m  # and it reads back as the same model


def test_a_key_no_model_knows_survives_a_save(tmp_path: Path) -> None:
    """A manifest from a newer specbench of the same schema keeps what this one does not know."""
    data = json.loads((FIXTURES / "schema" / "manifest_v2_full.json").read_text())
    data["from_the_future"] = {"x": [1, 2]}
    data["hardware"]["npu"] = "Ascend 910"
    data["engines"][0]["describe"]["served"] = {"metrics_check": "ok"}
    (tmp_path / rundir.MANIFEST).write_text(json.dumps(data))
    m = rundir.read_manifest(tmp_path)
    m.status = "interrupted"
    m.executors.append("ray")  # changed in place: still written
    rundir.write_manifest(tmp_path, m)
    saved = json.loads((tmp_path / rundir.MANIFEST).read_text())
    assert saved["from_the_future"] == {"x": [1, 2]} and saved["hardware"]["npu"] == "Ascend 910"
    assert saved["engines"][0]["describe"]["served"] == {"metrics_check": "ok"}
    assert saved["status"] == "interrupted" and saved["executors"] == ["local", "local", "ray"]
    assert list(saved) == list(data)  # in the order it was read


def test_build_manifest_is_what_a_run_stores(tmp_path: Path) -> None:
    """A new run's manifest is built in results/ from the suite and plan, typed, and reads back equal."""
    from specbench.config.plan import expand
    from specbench.config.suite import load_suite
    from specbench.results.manifest import build_manifest

    suite = load_suite(SUITES / "cpu-smoke.yaml")
    plan = expand(suite)
    m = build_manifest(suite, plan, run_id="r1", platform="cpu", limit=2, command="specbench run x",
                       datasets={d.name: {"source": "package", "sha256": "ab"} for d in suite.datasets},
                       engine_patches={"tiny": [{"name": "p", "summary": "s"}]})
    assert m.plan == plan.model_copy(update={"run": None}) and m.suite is not None and m.suite.name == suite.name
    assert m.hardware_class != "unknown" and m.limit == 2 and m.engine_patches["tiny"][0].name == "p"
    rundir.write_manifest(tmp_path, m)
    assert rundir.read_manifest(tmp_path) == m
    saved = json.loads((tmp_path / rundir.MANIFEST).read_text())
    assert saved["suite"] == suite.model_dump(mode="json") and "run" not in saved["plan"]


def test_a_resume_with_every_cell_done_writes_the_typed_manifest(run: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """api.run's manifest as a resumed run leaves it (no engine starts: every cell finished before):
    the engines keep what they recorded, the session's executor, resume time and status are added."""
    import yaml

    before = rundir.read_manifest(run)
    assert before.suite is not None
    suite = tmp_path / "recorded.yaml"
    suite.write_text(yaml.safe_dump(before.suite.model_dump(mode="json")))
    monkeypatch.setattr(api, "_build_zoo", lambda plan: None)  # its cells are done: no engine needs the zoo
    assert api.run(suite, resume=run, platform="cpu") == run
    after = rundir.read_manifest(run)
    assert after.status == "complete" and after.executors == ["local"] and len(after.resumed_at) == 1
    assert [(e.key, e.status) for e in after.engines] == [(e.key, "done earlier") for e in before.engines]
    assert [e.describe for e in after.engines] == [e.describe for e in before.engines]
    assert after.time_breakdown is not None and "a resumed run: the last session only" in after.time_breakdown.notes
    assert after.plan == before.plan and after.suite == before.suite and after.created_at == before.created_at
    saved = json.loads((run / rundir.MANIFEST).read_text())
    stored = json.loads((FIXTURES / "recorded" / "manifest.json").read_text())
    assert list(saved)[: len(stored)] == list(stored)  # the keys it had, where they were


# ---------------------------------------------------------------------------
# no untyped dicts in what a run stores

#: vLLM's own arguments, handed to it as given (typed by vLLM, not here)
VLLM_PASSTHROUGH = {"TargetSpec.chat_template_kwargs", "TargetSpec.engine_args", "MethodSpec.speculative_config",
                    "EngineConfig.speculative_config", "EngineDescription.llm_kwargs"}
#: left to type: a prompt's meta is built per dataset kind (category, input length, chat overhead …)
NOT_YET_TYPED = {"StoredPrompt.meta"}


def _untyped_dicts(model: type, seen: set[type]) -> list[str]:
    from typing import get_args, get_origin

    from pydantic import BaseModel

    out: list[str] = []

    def walk(t: Any, where: str) -> None:
        if isinstance(t, type) and issubclass(t, BaseModel):
            out.extend(_untyped_dicts(t, seen))
            return
        args = get_args(t)
        if get_origin(t) is dict and len(args) == 2 and args[1] is Any:
            out.append(where)
        for a in args:
            walk(a, where)

    if model in seen:
        return out
    seen.add(model)
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        walk(field.annotation, f"{model.__name__}.{name}")
    return out


def test_no_untyped_dict_in_the_stored_models() -> None:
    from specbench.results.records import CellRecord, RequestRecord
    from specbench.results.requests import StoredPrompt
    from specbench.results.summary import RunSummary

    seen: set[type] = set()
    found = {w for m in (RunManifest, RunSummary, RequestRecord, CellRecord, StoredPrompt)
             for w in _untyped_dicts(m, seen)}
    assert found - VLLM_PASSTHROUGH - NOT_YET_TYPED == set()
    assert len(seen) > 40  # it walked the nested models too
