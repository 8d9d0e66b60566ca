"""What a fresh clone needs is inside the repository: packaged data with licences, one settings object."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import tomllib
from support.paths import REPO

from specbench import datasets
from specbench.config.suite import DatasetSpec, SuiteError, load_suite
from specbench.settings import settings

# The workspace's data folder beside the repository, which users never have (spelled in parts so that
# this file does not name it either).
OUTSIDE = ("../" + "shared", "shared/" + "data/")


@pytest.mark.parametrize(("kind", "rows", "first_key"), [("gsm8k", 1319, "question"), ("spec_bench", 480, "turns")])
def test_packaged_datasets_ship_whole_with_their_licence(kind: str, rows: int, first_key: str):
    f = datasets.packaged_file(kind)
    assert f.name.endswith(".jsonl.gz") and (f.parent / "LICENSE").is_file()
    data = datasets.read_jsonl(f)
    assert len(data) == rows and first_key in data[0]


def test_a_dataset_without_path_uses_the_packaged_copy_and_says_so(tmp_path: Path):
    spec = DatasetSpec(name="g", kind="gsm8k", limit=3)
    prompts = datasets.prepare(spec, tmp_path)
    assert [p.prompt_id for p in prompts] == ["gsm8k-0", "gsm8k-1", "gsm8k-2"]
    assert prompts[0].reference and "####" in prompts[0].reference
    src = datasets.source_of(spec, tmp_path)
    assert src["source"] == "package" and len(src["sha256"]) == 64 and "MIT" in src["license"]
    hub = datasets.source_of(DatasetSpec(name="g", kind="gsm8k", source="hub"), tmp_path)
    assert (hub["source"], hub["location"], hub["config"]) == ("hub", "openai/gsm8k", "main")
    sb = datasets.prepare(DatasetSpec(name="s", kind="spec_bench", limit=2), tmp_path)
    assert sb[0].prompt_id == "spec_bench-81" and sb[0].meta["category"] == "writing"


def _suite(tmp_path: Path, dataset: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        "name: s\ntargets:\n  - name: t\n    model: tiny\n    methods: [{method: baseline}]\n"
        f"datasets:\n  - {dataset}\n"
    )
    return p


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ("{name: g, kind: gsm8k, split: train}", "packaged GSM8k copy is the test split"),
        ("{name: g, kind: gsm8k, hub_id: x/y}", "hub_id is read with source: hub"),
        ("{name: g, kind: gsm8k, source: hub, path: a.jsonl}", "not both"),
        ("{name: g, kind: jsonl}", "needs a local 'path'"),
    ],
)
def test_dataset_source_mistakes_are_suite_errors_with_a_line(tmp_path: Path, dataset: str, message: str):
    if "a.jsonl" in dataset:
        (tmp_path / "a.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    with pytest.raises(SuiteError) as exc:
        load_suite(_suite(tmp_path, dataset))
    assert any(message in m and ":7:" in m for m in exc.value.messages), exc.value.messages


def test_nothing_tracked_refers_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in files:
        path = REPO / name
        if path.suffix in {".gz", ".png", ".safetensors"} or not path.is_file():
            continue
        text = path.read_text(errors="ignore")
        if any(needle in text for needle in OUTSIDE):
            offenders.append(name)
    assert offenders == []


def test_settings_read_the_environment_when_called(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("SPECBENCH_PLATFORM", "cuda")
    monkeypatch.setenv("SPECBENCH_ENGINE_START_TIMEOUT", "12.5")
    s = settings()
    assert (s.cache, s.platform, s.engine_start_timeout) == (tmp_path, "cuda", 12.5)
    monkeypatch.setenv("SPECBENCH_PLATFORM", "tpu")
    with pytest.raises(ValueError):
        settings()


def test_python_version_is_stated_once_and_the_package_data_is_declared():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["requires-python"] == ">=3.11"
    assert "cpu" not in meta["project"]["optional-dependencies"]  # scripts/install.sh is the CPU install
    assert "datasets/data/*/*" in meta["tool"]["setuptools"]["package-data"]["specbench"]
    assert (REPO / "specbench" / "py.typed").is_file()
    assert "requires-python" in (REPO / "scripts" / "install.sh").read_text()
