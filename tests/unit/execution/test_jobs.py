"""Engine jobs, their events and the stop mechanics, on hand-built data (no engine)."""

from __future__ import annotations

import pytest
from support.factories import cell, counters, request

from specbench.analysis.cell_stopper import CellStopper, measurable
from specbench.analysis.sequential import seeded_order
from specbench.config.plan import EngineConfig
from specbench.config.stop_rule import StopRule
from specbench.config.suite import MethodSpec, TargetSpec
from specbench.engines.factory import ResolvedEngine, engine_gpus
from specbench.execution.jobs import (
    CellDone,
    CellStarted,
    EngineJob,
    EngineState,
    JobEnded,
    PhaseTimed,
    Placement,
    RequestDone,
    ScoresDone,
    parse_event,
)
from specbench.execution.worker import warmup_requests
from specbench.results.records import CellRecord, RequestRecord
from specbench.results.requests import CellRequest, PreparedPrompt, SamplingRequest


def _record(pid: str, accepted: int, drafts: int, cell_id: str = "t/eagle3/d/T0/b1/r0") -> RequestRecord:
    return request(cell_id, pid, engine_key="t--eagle3", output_text="x", latency_s=1.0, ttft_s=0.1,
                   spec=counters(accepted, drafts, per_position=[accepted, 0, 0]))


def test_every_event_survives_its_json_form() -> None:
    place = Placement(executor="ray", hostname="h", node_id="n", node_ip="1.2.3.4", pid=7, gpu_ids=["0"])
    events = [
        EngineState(job_id="j", state="started", describe={"dtype": "float32"}, placement=place),
        CellStarted(job_id="j", cell_id="c", prompts=4),
        RequestDone(job_id="j", record=_record("p", 3, 2)),
        CellDone(job_id="j", record=CellRecord(run_id="r", cell_id="c", engine_key="j", status="ok")),
        ScoresDone(job_id="j", rows=[{"cell_id": "c", "error": "x"}], done=1, total=2),
        PhaseTimed(job_id="j", phase="warmup", start=1.0, end=2.5, gpus=2),
        JobEnded(job_id="j", error="Ray worker or node died: …"),
    ]
    for ev in events:
        assert parse_event(ev.model_dump(mode="json")) == ev


def test_engine_gpus_and_the_mp_backend_for_tp_on_ray() -> None:
    target = TargetSpec(name="t", model="m", tensor_parallel_size=2, methods=[MethodSpec(method="baseline")])
    cfg = EngineConfig(key="t--baseline", target=target, method=MethodSpec(method="baseline"), vllm_method=None,
                       speculative_config=None)
    assert engine_gpus(cfg, "cuda") == 2 and engine_gpus(cfg, "cpu") == 0
    from specbench.execution.executors.ray_executor import RayExecutor

    job = EngineJob(job_id="j", run_id="r", run_dir="/tmp", platform="cuda", gpus=2,
                    engine=ResolvedEngine(config=cfg, model_path="m", speculator_path=None, engine_kwargs={}))
    assert RayExecutor._prepared(job).engine.engine_kwargs["distributed_executor_backend"] == "mp"
    assert "distributed_executor_backend" not in RayExecutor._prepared(job.model_copy(update={"gpus": 1})).engine.engine_kwargs


def test_warmups_cover_each_load_and_sampling_shape_once() -> None:
    prompts = [PreparedPrompt(prompt_id=f"p{i}", text="x") for i in range(8)]
    greedy = SamplingRequest(temperature=0.0, max_tokens=64, logprobs=5)
    reqs = [CellRequest(run_id="r", cell=cell("eagle3", k=3, cell_id=f"c{bs}", batch_size=bs), prompts=prompts,
                        sampling=greedy) for bs in (1, 4, 4)]
    warm = warmup_requests(reqs)
    assert [(w.cell.batch_size, len(w.prompts), w.sampling.max_tokens) for w in warm] == [(1, 1, 8), (4, 4, 8)]


def test_stopper_blocks_and_what_it_cannot_measure() -> None:
    prompts = [PreparedPrompt(prompt_id=f"p{i:02d}", text="x") for i in range(64)]
    rule = StopRule(metric="tau", rel_half_width=0.1, min_prompts=16, check_every=16)
    s = CellStopper(rule, prompts, seed=3, speculative=True)
    assert s.blocks() == [(0, 16), (16, 32), (32, 48), (48, 64)]
    assert [p.prompt_id for p in s.prompts] == seeded_order([p.prompt_id for p in prompts], 3)
    base = CellStopper(rule.model_copy(update={"max_prompts": 40}), prompts, seed=3, speculative=False)
    assert base.unmeasurable and base.blocks() == [(0, 40)]
    assert base.check(40) and base.record().reason.startswith("max_prompts")
    # Paired: never past the prompts the baseline ran (a prefix of the same order).
    ran = [_record(pid, 1, 1, "t/baseline/d/T0/b1/r0") for pid in s.order[:20]]
    speed = CellStopper(rule.model_copy(update={"metric": "speedup"}), prompts, seed=3, speculative=True, paired=ran)
    assert speed.n_available == 20 and speed.blocks() == [(0, 16), (16, 20)]
    assert measurable(rule.model_copy(update={"metric": "accuracy"}), speculative=True, has_baseline=False,
                      dataset_kind="humaneval")


@pytest.mark.parametrize("spread", [0, 1])
def test_stopper_checks_the_confidence_sequence(spread: int) -> None:
    prompts = [PreparedPrompt(prompt_id=f"p{i:03d}", text="x") for i in range(256)]
    rule = StopRule(metric="tau", rel_half_width=0.05, min_prompts=32, check_every=32)
    s = CellStopper(rule, prompts, seed=0, speculative=True)
    for n_end in (32, 64, 96, 128):
        for i, pid in enumerate(s.order[n_end - 32 : n_end]):
            s.records.append(_record(pid, 20 + spread * (i % 5), 10))
        if s.check(n_end):
            break
    rec = s.record()
    if spread:  # τ varies from prompt to prompt: tight enough after a few blocks
        assert rec.reason == "target" and rec.n_used < 256 and rec.half_width <= rec.target_half_width
    else:  # no spread at all: the sequence cannot claim anything, the cell goes on
        assert not s.decision.stop and rec.n_used == 128
