"""A suite's ``slo:`` (goodput's objectives, milliseconds under vLLM's names): what loads, and every bad input
exits 2 with the suite file's line, as typed (issue 52)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config.suite import SuiteError, load_suite

SUITE = """\
name: slo
targets:
  - name: tiny
    model: tiny
    engine: {engine}
    methods:
      - method: baseline
datasets:
  - name: humaneval
    kind: humaneval
slo:
{slo}
"""


def _suite(tmp_path: Path, slo: str, engine: str = "vllm-server") -> Path:
    p = tmp_path / "suite.yaml"
    p.write_text(SUITE.format(engine=engine, slo=textwrap.indent(textwrap.dedent(slo).strip(), "  ")))
    return p


def _line(p: Path, needle: str) -> int:
    return next(i for i, line in enumerate(p.read_text().splitlines(), 1) if needle in line)


def test_the_three_objectives_load_in_milliseconds(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, "ttft: 250\ntpot: 12.5\ne2el: 3000"))
    assert suite.slo is not None and suite.slo.given() == {"ttft": 250.0, "tpot": 12.5, "e2el": 3000.0}
    assert load_suite(_suite(tmp_path, "tpot: 20", engine="vllm-offline")).slo.given() == {"tpot": 20.0}  # type: ignore[union-attr]


@pytest.mark.parametrize(("slo", "needle", "message"), [
    ("ttft: 200\nitl: 5", "itl: 5", "slo.itl: unknown key 'itl'"),
    ("e2e: 900", "e2e: 900", "slo.e2e: unknown key 'e2e'; did you mean 'e2el'?"),
    ("ttft: 0", "ttft: 0", "slo.ttft: an SLO is a time > 0 in milliseconds, got 0"),
    ("tpot: -5", "tpot: -5", "slo.tpot: an SLO is a time > 0 in milliseconds, got -5"),
    ("e2el: .nan", "e2el: .nan", "slo.e2el: Input should be a finite number"),
    ("{}", "slo:", "slo: give at least one objective in milliseconds: ttft, tpot, e2el"),
], ids=["unknown", "misspelt", "zero", "negative", "nan", "empty"])
def test_a_bad_objective_is_an_error_at_its_line(tmp_path: Path, slo: str, needle: str, message: str) -> None:
    p = _suite(tmp_path, slo)
    with pytest.raises(SuiteError) as info:
        load_suite(p)
    assert info.value.messages == [f"{p}:{_line(p, needle)}: {message}"]


def test_an_objective_on_what_an_engine_does_not_measure(tmp_path: Path) -> None:
    """The reference simulator times nothing: an SLO in a suite with such a target could only count misses."""
    p = _suite(tmp_path, "ttft: 200\ne2el: 900", engine="reference")
    with pytest.raises(SuiteError) as info:
        load_suite(p)
    assert info.value.messages == [
        f"{p}:{_line(p, 'ttft: 200')}: slo.ttft: an SLO on time to first token, which target 'tiny' (engine: "
        "reference) does not measure (measured by engine: vllm-server, vllm-offline)",
        f"{p}:{_line(p, 'e2el: 900')}: slo.e2el: an SLO on end-to-end request latency, which target 'tiny' "
        "(engine: reference) does not measure (measured by engine: vllm-server, vllm-offline)"]


@pytest.mark.parametrize(("slo", "engine", "needle"), [
    ("ttft: 200\nitl: 5", "vllm-server", "itl: 5"), ("ttft: 0", "vllm-server", "ttft: 0"),
    ("tpot: -1", "vllm-offline", "tpot: -1"), ("ttft: 200", "reference", "ttft: 200"),
], ids=["unknown", "zero", "negative", "not measured"])
def test_validate_exits_2_with_the_line_as_typed(tmp_path: Path, slo: str, engine: str, needle: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    p = _suite(tmp_path, slo, engine=engine)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["validate", "suite.yaml"])
    assert result.exit_code == 2, result.output
    assert f"suite.yaml:{_line(p, needle)}: slo." in result.output and "Traceback" not in result.output
