"""A/B arms (issue 36): what an arm changes, the suite both arms run, and bad arms as bad input."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.paths import SUITES
from typer.testing import CliRunner

from specbench import api
from specbench.cli import app
from specbench.config.arms import (
    Arm,
    ArmError,
    MethodOverride,
    ab_suite,
    arm_of,
    base_target,
    load_arm,
    pairs_taking_turns,
)
from specbench.config.suite import SuiteError, load_suite


def _suite():
    return load_suite(SUITES / "cpu-gate.yaml")


def test_every_target_runs_once_per_arm_with_the_arm_applied() -> None:
    suite = _suite()
    a = Arm()
    b = Arm(python=sys.executable, env={"X": "1"}, engine_patches=["planted-step-delay"],
            methods={"eagle3": MethodOverride(num_speculative_tokens=2, speculative_config={"k": 1})})
    both = ab_suite(suite, a, b)
    names = [t.name for t in both.targets]
    assert names == [n for t in suite.targets for n in (f"{t.name}@a", f"{t.name}@b")]
    ta, tb = both.targets[0], both.targets[1]
    assert ta.python == sys.executable  # this environment: its interpreter, started as the other arm's is
    assert ta.env == {} and ta.engine_patches == suite.targets[0].engine_patches
    assert tb.python == sys.executable and tb.env == {"X": "1"}
    assert tb.engine_patches == [*suite.targets[0].engine_patches, "planted-step-delay"]
    eb = next(m for m in tb.methods if m.label == "eagle3")
    ea = next(m for m in ta.methods if m.label == "eagle3")
    assert eb.num_speculative_tokens == 2 and eb.speculative_config == {**ea.speculative_config, "k": 1}
    assert ea.num_speculative_tokens != 2
    assert [base_target(n) for n in names] == [t.name for t in suite.targets for _ in "ab"]
    assert [arm_of(n) for n in names] == ["a", "b"] * len(suite.targets) and arm_of("tiny") is None


def test_arms_that_cannot_apply_are_bad_input() -> None:
    suite = _suite()
    with pytest.raises(ArmError, match="no method 'nope'"):
        ab_suite(suite, Arm(), Arm(methods={"nope": MethodOverride(speculator="x")}))
    with pytest.raises(SuiteError, match="rounds"):
        ab_suite(suite.model_copy(update={"rounds": 1}), Arm(), Arm())
    t = suite.targets[0].model_copy(update={"name": "x@y"})
    with pytest.raises(ArmError, match="reserved"):
        ab_suite(suite.model_copy(update={"targets": [t]}), Arm(), Arm())


def test_an_arm_is_nothing_an_interpreter_or_a_file_with_file_line_errors(tmp_path: Path) -> None:
    assert load_arm(None) == Arm() and load_arm(".") == Arm()
    assert load_arm("/opt/other/bin/python").python == "/opt/other/bin/python"
    f = tmp_path / "b.yaml"
    f.write_text("python: /usr/bin/python3\nengine_patches: [planted-step-delay]\nenv: {SPECBENCH_PLANTED_STEP_FRACTION: 0.1}\n")
    arm = load_arm(str(f))
    assert arm.env == {"SPECBENCH_PLANTED_STEP_FRACTION": "0.1"} and "patch planted-step-delay" in arm.describe()
    bad = tmp_path / "bad.yaml"
    bad.write_text("python: /usr/bin/python3\n\nmethod:\n  eagle3: {}\n")
    with pytest.raises(SuiteError) as exc:
        load_arm(str(bad))
    assert exc.value.messages == [f"{bad}:3: method: unknown key 'method'; did you mean 'methods'?"]


def test_a_target_python_that_is_not_there_is_reported_where_typed(tmp_path: Path) -> None:
    text = (SUITES / "cpu-gate.yaml").read_text()
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.strip().startswith("- name:"))
    indent = lines[i].index("-") + 2
    lines.insert(i + 1, " " * indent + "python: /no/such/python")
    s = tmp_path / "s.yaml"
    s.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError) as exc:
        load_suite(s)
    assert any(m.startswith(f"{s}:{i + 2}: targets[0].python:") and "not an executable" in m for m in exc.value.messages)


def test_on_a_gpu_a_pair_that_does_not_fit_takes_turns_with_vllms_sleep_mode(tmp_path: Path) -> None:
    """On a GPU a pair whose two engines do not fit together (vLLM's default share 0.9, or over 0.5)
    takes turns with vLLM's sleep mode: its engines get enable_sleep_mode (a launched server also its
    development endpoints), the dry run says so; a pair that fits shares the GPU; on CPU nothing changes."""
    suite = _suite()
    def at(share: float | None, engine: str = "vllm-offline"):
        return suite.model_copy(update={"targets": [t.model_copy(update={"gpu_memory_utilization": share,
                                                                          "engine": engine})
                                                    for t in suite.targets]})
    assert pairs_taking_turns(suite) == ["tiny"]  # cpu-gate says nothing: vLLM's default share, 0.9
    assert pairs_taking_turns(at(0.45)) == [] and pairs_taking_turns(at(0.5)) == []
    assert pairs_taking_turns(at(0.6)) == ["tiny"]

    turns = api.ab_plan(suite, platform="cuda")
    assert turns.residency.startswith("GPU: target(s) 'tiny':") and "take turns with vLLM's sleep mode" in turns.residency
    assert "level 1" in turns.residency and "untimed" in turns.residency
    assert [t.name for t in turns.plan.suite.targets] == ["tiny@a", "tiny@b"]
    assert all(t.engine_args.get("enable_sleep_mode") is True for t in turns.plan.suite.targets)
    assert all(e.target.engine_args.get("enable_sleep_mode") is True for e in turns.plan.plan.engines)
    served = api.ab_plan(at(None, "vllm-server"), platform="cuda").plan.suite.targets
    assert all(t.env.get("VLLM_SERVER_DEV_MODE") == "1" for t in served)  # vLLM serves /sleep and /wake_up only so

    fits = api.ab_plan(at(0.45), platform="cuda")
    assert fits.residency == "GPU: target(s) 'tiny': an engine and its counterpart share one GPU " \
        "(gpu_memory_utilization 0.45 each), no sleep mode"
    assert not any("enable_sleep_mode" in t.engine_args for t in fits.plan.suite.targets)
    cpu = api.ab_plan(suite, platform="cpu")
    assert cpu.residency.startswith("CPU:") and not any("enable_sleep_mode" in t.engine_args for t in cpu.plan.suite.targets)

    cli = CliRunner().invoke(app, ["ab", str(SUITES / "cpu-gate.yaml"), "--dry-run", "--platform", "cuda"])
    assert cli.exit_code == 0, cli.output
    assert "take turns with vLLM's sleep mode" in cli.output and "enable_sleep_mode" in cli.output
    assert not any(tmp_path.iterdir())  # a dry run starts nothing
