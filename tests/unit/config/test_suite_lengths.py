"""Suite options for context length and SPEED-Bench: bad input exits 2 with file:line
(a length over the context, an unknown config, input_tokens on a dataset that cannot
build lengths); suites/speed-bench.yaml dry-runs here. Pure: no engine, no hub."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from support.paths import SUITES
from typer.testing import CliRunner

from specbench.cli import app
from specbench.config.suite import SuiteError, load_suite

GOOD = """
name: lengths
targets:
  - name: tiny
    model: tiny
    max_model_len: 1024
    methods:
      - method: baseline
      - method: eagle3
        speculator: tiny:eagle3
        num_speculative_tokens: 3
datasets:
  - name: ctx
    kind: spec_bench
    input_tokens: [64, 256, 768]
    limit: 2
  - name: speed
    kind: speed_bench
    config: qualitative
    source: hub
sampling:
  max_tokens: 64
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "suite.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _exits_2(path: Path, *needles: str) -> str:
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for n in needles:
        assert n in result.output, result.output
    return result.output


def test_the_options_validate(tmp_path: Path):
    suite = load_suite(_write(tmp_path, GOOD))
    assert suite.datasets[0].input_tokens == [64, 256, 768] and suite.datasets[1].config == "qualitative"


def test_a_length_over_the_context_is_an_error_at_its_line(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("[64, 256, 768]", "[64, 256,\n      1000]"))
    _exits_2(p, f"{p}:{_line_of(p, '1000]')}: datasets[0].input_tokens[2]: input length 1000 does not fit target "
                "'tiny': max_model_len 1024 − max_tokens 64 leaves 960")


def test_a_throughput_split_over_the_context_is_an_error(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("config: qualitative", "config: throughput_2k"))
    _exits_2(p, f"{p}:{_line_of(p, 'throughput_2k')}: datasets[1].config: SPEED-Bench throughput_2k")


def test_an_unknown_config_names_the_closest_and_the_valid_ones(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("config: qualitative", "config: throughput_4k"))
    out = _exits_2(p, f"{p}:{_line_of(p, 'throughput_4k')}: datasets[1].config: unknown SPEED-Bench config "
                      "'throughput_4k'; did you mean")
    assert "throughput_32k" in out


def test_input_tokens_on_a_dataset_that_cannot_build_lengths(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("kind: spec_bench", "kind: gsm8k"))
    _exits_2(p, f"{p}:{_line_of(p, 'input_tokens')}: datasets[0].input_tokens: a gsm8k dataset cannot build "
                "prompts of given lengths")


@pytest.mark.parametrize("edit, needle", [
    (("kind: spec_bench\n", "kind: spec_bench\n    config: qualitative\n"), "config selects a SPEED-Bench split"),
    (("    config: qualitative\n", ""), "a speed_bench dataset needs a config"),
    (("    source: hub\n", ""), "SPEED-Bench is not shipped with specbench"),
    (("[64, 256, 768]", "[16, 256, 256]"), "must be >= 32"),
    (("[64, 256, 768]", "[64, 256, 256]"), "duplicate input length 256"),
    (("limit: 2", "limit: 2\n    categories: [coding]"), "with input_tokens the contexts come from summarization"),
    (("limit: 2", "limit: 2\n    prompt_template: 'Q: {question}'"), "a prompt_template would change it"),
])
def test_other_bad_input(tmp_path: Path, edit: tuple[str, str], needle: str):
    p = _write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(SuiteError) as info:
        load_suite(p)
    assert any(m.startswith(f"{p}:") and needle in m for m in info.value.messages), info.value.messages


def test_speed_bench_suite_dry_runs_without_the_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = CliRunner().invoke(app, ["run", str(SUITES / "speed-bench.yaml"), "--dry-run"])
    assert result.exit_code == 0, result.output
    suite = load_suite(SUITES / "speed-bench.yaml")
    assert {d.config for d in suite.datasets} == {"qualitative", "throughput_2k", "throughput_8k"}
    gsm8k = {m.speculator for t in load_suite(SUITES / "gsm8k.yaml").targets for m in t.methods}
    for m in suite.targets[0].methods:
        assert m.speculator is None or m.speculator in gsm8k  # the checkpoints of suites/gsm8k.yaml
        assert f"engine qwen3-8b--{m.label} " in result.output
    assert {m.method for m in suite.targets[0].methods} == {"baseline", "eagle3", "p-eagle", "dflash", "dspark"}
    assert "the first user turn of each row is sent" in result.output
