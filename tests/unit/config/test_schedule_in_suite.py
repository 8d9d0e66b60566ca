"""A method run with a dynamic-speculation schedule (issue 37): explicit, or taken from a run's schedule
file; what vLLM would refuse or silently change is a suite error at the schedule's line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config.plan import expand
from specbench.config.suite import load_suite

SUITE = """\
name: sched
targets:
  - name: t
    model: tiny
    assets: trained
    hardware: cpu
    methods:
      - method: eagle3
        speculator: tiny:eagle3
        num_speculative_tokens: 3
        schedule: {schedule}
datasets:
  - name: d
    kind: gsm8k
"""


def _write(tmp_path: Path, schedule: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(SUITE.format(schedule=schedule))
    return p


def test_an_explicit_schedule_reaches_the_speculative_config(tmp_path: Path) -> None:
    suite = load_suite(_write(tmp_path, "[[1, 2, 3], [3, 8, 1], [9, 256, 0]]"))
    (engine,) = expand(suite).engines
    assert engine.speculative_config["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 8, 1], [9, 256, 0]]
    assert engine.speculative_config["num_speculative_tokens"] == 3


def test_a_schedule_file_is_read_once_into_the_suite(tmp_path: Path) -> None:
    entry = {"method": "eagle3", "dataset": "gsm8k", "temperature": 0.0,
             "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 256, 0]]}
    (tmp_path / "schedule.json").write_text(json.dumps({"schedules": [entry, {**entry, "temperature": 0.5}]}))
    suite = load_suite(_write(tmp_path, "{file: schedule.json, temperature: 0.0}"))
    assert suite.targets[0].methods[0].schedule == [[1, 4, 3], [5, 256, 0]]
    with pytest.raises(Exception, match="2 schedules in 'schedule.json' match"):
        load_suite(_write(tmp_path, "{file: schedule.json}"))


@pytest.mark.parametrize(("schedule", "says"), [
    ("[[2, 8, 3], [9, 256, 1]]", "the first range starts at 2, not 1"),
    ("[[1, 8, 3], [8, 256, 1]]", "ranges [1, 8] and [8, 256] overlap"),
    ("[[1, 8, 4], [9, 256, 1]]", "range [1, 8]: K = 4 is above num_speculative_tokens = 3 (vLLM would clamp it to 3)"),
    ("[[1, 8, 3], [9, 512, 1]]", "range [9, 512] passes max_num_seqs = 256 (vLLM would truncate it)"),
])
def test_what_vllm_would_refuse_or_change_exits_2_at_its_line(tmp_path: Path, schedule: str, says: str) -> None:
    path = _write(tmp_path, schedule)
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    assert f"{path}:11: targets[0].methods[0].schedule: {says}" in res.output.replace("\n", ""), res.output


def test_synthetic_acceptance_on_cpu_exits_2_saying_vllm_cpu_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SUITE.replace(
        "        schedule: {schedule}\n",
        "        speculative_config: {rejection_sample_method: synthetic, synthetic_acceptance_length: 2.5}\n"))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    out = res.output.replace("\n", "")
    assert f"{path}:11: targets[0].methods[0].speculative_config.rejection_sample_method:" in out, res.output
    assert "Synthetic acceptance not supported with CPU sampling" in out


def test_a_scheduled_method_carries_its_schedule_into_its_cells_and_groups(tmp_path: Path) -> None:
    suite = load_suite(_write(tmp_path, "[[1, 2, 3], [3, 256, 0]]"))
    cells = expand(suite).cells
    assert cells and all(c.schedule == [(1, 2, 3), (3, 256, 0)] for c in cells)
