"""The engine contract: every engine implements the whole protocol and declares its
capabilities; teacher-forcing rows keep their stored shape; the planner's run decisions
match the suite (no engine is started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.paths import RECORDED, SUITES

from specbench.config.plan import EngineConfig, Plan, expand, sampled_prompt_limit, with_decisions
from specbench.config.suite import MethodSpec, TargetSpec, load_suite
from specbench.engines.child import ChildEngine
from specbench.engines.factory import ResolvedEngine, make_engine
from specbench.engines.protocol import CellFailed, Engine, Sleeper, sleeper
from specbench.engines.reference import ReferenceEngine
from specbench.engines.vllm_offline import VllmOfflineEngine
from specbench.engines.vllm_server import VllmServerEngine
from specbench.execution.driver import sampling_for
from specbench.execution.jobs import ScoresDone, parse_event
from specbench.execution.teacher_forcing import ORDER, SCORER, score_rows
from specbench.results.manifest import RunManifest
from specbench.results.requests import ScoreItem, ScoreKey, ScoreResult, ScoreRow

PROTOCOL_MEMBERS = ("capabilities", "start", "run_cell", "score", "alive", "kill", "close", "describe")


def _cfg(engine: str, method: str = "baseline") -> EngineConfig:
    return EngineConfig(key=f"t--{method}", target=TargetSpec(name="t", model="m", engine=engine,
                                                              methods=[MethodSpec(method=method)]),
                        method=MethodSpec(method=method), vllm_method=None, speculative_config=None)


@pytest.mark.parametrize("cls", [VllmOfflineEngine, VllmServerEngine, ReferenceEngine, ChildEngine])
def test_every_engine_class_implements_the_whole_protocol(cls: type) -> None:
    missing = [m for m in PROTOCOL_MEMBERS if not hasattr(cls, m)]
    assert missing == [], f"{cls.__name__} lacks {missing}"


@pytest.mark.parametrize(("kind", "scores", "server"), [
    ("vllm-offline", True, False), ("vllm-server", False, True), ("reference", False, False),
])
def test_the_factory_builds_engines_that_declare_their_capabilities(tmp_path: Path, kind: str, scores: bool,
                                                                     server: bool) -> None:
    res = ResolvedEngine(config=_cfg(kind), model_path="m", speculator_path=None, engine_kwargs={"model": "m"})
    engine: Engine = make_engine(res, tmp_path)
    assert (engine.capabilities.kind, engine.capabilities.scores, engine.capabilities.server) == (kind, scores, server)
    assert not engine.alive  # not started
    engine.close()  # closing an engine that never started is a no-op
    if not scores:
        with pytest.raises(CellFailed, match="cannot teacher-force"):
            engine.score([])


SLEEPER_MEMBERS = tuple(m for m in vars(Sleeper) if not m.startswith("_"))


@pytest.mark.parametrize("kind", ["vllm-offline", "vllm-server"])
@pytest.mark.parametrize("sleep_mode", [True, False])
def test_an_engine_sleeps_when_its_capabilities_say_so(tmp_path: Path, kind: str, sleep_mode: bool) -> None:
    kwargs = {"model": "m", **({"enable_sleep_mode": True} if sleep_mode else {})}
    engine = make_engine(ResolvedEngine(config=_cfg(kind), model_path="m", speculator_path=None,
                                        engine_kwargs=kwargs), tmp_path)
    assert engine.capabilities.sleeps is sleep_mode
    if sleep_mode:  # what it declares, it has: the sleeper's operations
        assert SLEEPER_MEMBERS == ("sleep", "wake_up")
        assert all(callable(getattr(sleeper(engine), m)) for m in SLEEPER_MEMBERS)
    else:
        with pytest.raises(CellFailed, match="sleep mode"):
            sleeper(engine)


def test_only_the_offline_engine_prepares_a_zygote_for_the_next(tmp_path: Path) -> None:
    res = ResolvedEngine(config=_cfg("vllm-offline"), model_path="m", speculator_path=None, engine_kwargs={})
    engine = make_engine(res, tmp_path, prepare_next=True)
    assert isinstance(engine, VllmOfflineEngine) and engine.prepare_next


def test_score_rows_keep_the_stored_shape() -> None:
    key = ScoreKey(cell_id="c", prompt_id="p", sample_index=1, repeat=0, temperature=0.5, top_p=1.0)
    item = ScoreItem(key=key, text="x", output_token_ids=[1, 2], temperature=0.5)
    ok, bad = score_rows([item, item], [ScoreResult(f_minus=[0.25, 0.5], p=[0.5, 0.25]), ScoreResult(error="boom")])
    assert list(ok.stored()) == ["cell_id", "prompt_id", "sample_index", "repeat", "temperature", "top_p", "order",
                                 "scorer", "f_minus", "p"]
    assert ok.stored()["order"] == ORDER and ok.stored()["scorer"] == SCORER
    assert bad.stored()["error"] == "boom" and "f_minus" not in bad.stored()
    # An engine that never started: only the target (None when unknown) and the error.
    assert ScoreRow(target=None, error="x").stored() == {"target": None, "error": "x"}
    # Through an event's JSON form (how a Ray worker's events come back) the shape stays.
    ev = parse_event(ScoresDone(job_id="j", rows=[ok, bad], done=2, total=2).model_dump(mode="json"))
    assert isinstance(ev, ScoresDone) and [r.stored() for r in ev.rows] == [ok.stored(), bad.stored()]


def test_the_plan_carries_the_run_decisions_and_the_stored_plan_does_not() -> None:
    suite = load_suite(SUITES / "cpu-smoke.yaml")
    plan = expand(suite)
    run = plan.decisions()
    assert [d.name for d in run.datasets] == [d.name for d in suite.datasets]
    assert run.teacher_forcing == (suite.equivalence.sampled is not None)
    stored = plan.model_dump(mode="json")
    assert set(stored) == {"suite_name", "engines", "cells"}  # manifest.json's plan keeps its shape
    back = Plan.model_validate(json.loads(json.dumps(stored)))
    with pytest.raises(ValueError, match="re-plan"):
        back.decisions()
    assert with_decisions(back, suite).decisions() == run
    for c in plan.cells:
        s = sampling_for(run, c)
        assert s.max_tokens == suite.sampling.max_tokens and s.temperature == c.temperature
        assert run.sampling_at(c.temperature).prompt_limit == sampled_prompt_limit(suite, c.temperature)
        if c.temperature == 0:
            assert s.samples_per_prompt == 1
            assert s.logprobs == (suite.equivalence.logprobs if suite.equivalence.greedy else None)
        else:
            assert s.logprobs is None and s.samples_per_prompt > 1  # cpu-smoke's sampled test takes 4


def test_the_recorded_manifest_loads_typed() -> None:
    m = RunManifest.load(json.loads((RECORDED / "manifest.json").read_text()))
    assert m.suite is not None and m.plan is not None
    assert m.plan.cells and m.suite.name == m.suite_name
