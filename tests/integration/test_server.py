"""Server mode against a REAL vLLM CPU server: the tiny target drafting for itself (draft_model, K=3).

One server is shared by the module (start ≈ 30 s); the kill test runs last
and restarts a fresh one. Run under the CPU lock:
``flock /tmp/specbench-cpu.lock pytest -m integration tests/integration/test_server.py``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from specbench.analysis.serving_metrics import summarize_cell
from specbench.config.plan import Cell, EngineConfig
from specbench.config.suite import MethodSpec, TargetSpec
from specbench.engines.loadgen import LoadProfile
from specbench.engines.protocol import CellFailed, EngineUnavailable
from specbench.engines.vllm_args import build_engine_kwargs, platform_defaults
from specbench.engines.vllm_server import VllmServerEngine
from specbench.results.counters import counters_tau as tau
from specbench.results.parts import ServingCellRow, ServingSpeedupRow
from specbench.results.records import RequestRecord, SpecCounters
from specbench.results.requests import CellRequest, PreparedPrompt, SamplingRequest

K = 3
ENV = {**platform_defaults({}, "cpu"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # as the factory's


def _assets() -> Any:
    from specbench.zoo.assets import ensure_assets

    return ensure_assets(progress=False)


def _config(target: str, method: MethodSpec, spec_cfg: dict[str, Any] | None) -> EngineConfig:
    t = TargetSpec(
        name="tiny", model=target, engine="vllm-server", methods=[method], max_model_len=512,
        engine_args={"enforce_eager": True},
    )  # fmt: skip
    return EngineConfig(
        key=f"tiny--{method.label}",
        target=t,
        method=method,
        vllm_method=method.method,
        speculative_config=spec_cfg,
    )


def _engine(log: Path, assets: Any) -> VllmServerEngine:
    target = str(assets.target)
    m = MethodSpec(method="draft_model", num_speculative_tokens=K, speculator="target")
    cfg = _config(target, m, {"method": "draft_model", "num_speculative_tokens": K})
    return VllmServerEngine(cfg, build_engine_kwargs(cfg, target, target), log, ENV)


def _cell(bs: int, name: str = "d") -> Cell:
    return Cell(
        cell_id=f"tiny/draft_model/{name}/T0/b{bs}/r0", engine_key="tiny--draft_model", target="tiny",
        method="draft_model", method_kind="draft_model", k=K, dataset=name, temperature=0.0, batch_size=bs, repeat=0,
    )  # fmt: skip


def _request(bs: int, n_prompts: int = 8, max_tokens: int = 32, name: str = "d") -> CellRequest:
    prompts = [PreparedPrompt(prompt_id=f"p{i}", text=f"def f{i}(x):") for i in range(n_prompts // 2)]
    prompts += [
        PreparedPrompt(prompt_id=f"c{i}", messages=[{"role": "user", "content": f"hello {i}"}])
        for i in range(n_prompts - n_prompts // 2)
    ]
    return CellRequest(
        run_id="it", cell=_cell(bs, name), prompts=prompts,
        sampling=SamplingRequest(temperature=0.0, max_tokens=max_tokens),
    )  # fmt: skip


def hand_read(base_url: str) -> tuple[SpecCounters, float]:
    """/metrics read by hand (regexes, not specbench.engines.prom): spec counters and generation tokens."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    vals: dict[str, float] = defaultdict(float)
    pos: dict[int, float] = defaultdict(float)
    for line in text.splitlines():
        m = re.match(r"^(vllm:[a-z_]+)_total(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            pos[int(re.search(r'position="(\d+)"', labels).group(1))] += value  # type: ignore[union-attr]
        else:
            vals[name] += value
    c = SpecCounters(
        num_drafts=int(vals["vllm:spec_decode_num_drafts"]),
        num_draft_tokens=int(vals["vllm:spec_decode_num_draft_tokens"]),
        num_accepted_tokens=int(vals["vllm:spec_decode_num_accepted_tokens"]),
        accepted_per_pos=[int(pos[i]) for i in range(len(pos))],
    )
    return c, vals["vllm:generation_tokens"]


@pytest.fixture(scope="module")
def assets() -> Any:
    return _assets()


@pytest.fixture(scope="module")
def engine(assets: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("server") / "engine.log"
    eng = _engine(log, assets)
    t0 = time.monotonic()
    eng.start()
    print(f"server start: {time.monotonic() - t0:.1f} s")
    yield eng
    eng.close()


@pytest.mark.parametrize("bs", [1, 4])
def test_concurrency_sweep_counters_match_metrics(engine: VllmServerEngine, bs: int) -> None:
    assert engine.base_url is not None
    req = _request(bs)
    before, gen_before = hand_read(engine.base_url)
    recs: list[RequestRecord] = []
    out = engine.run_cell(req, recs.append)
    after, gen_after = hand_read(engine.base_url)

    # Records: one per request, complete, token-counted timings.
    assert out.num_requests == len(recs) == 8
    assert sorted(r.prompt_id for r in recs) == sorted(p.prompt_id for p in req.prompts)
    for r in recs:
        assert r.error is None, r.error
        assert len(r.output_token_ids) == 32 and r.finish_reason == "length"
        assert r.ttft_s is not None and r.latency_s is not None and r.ttft_s <= r.latency_s
        assert r.itl_s is not None and len(r.itl_s) == 31
        assert sum(r.itl_s) == pytest.approx(r.latency_s - r.ttft_s)
        assert r.prompt_tokens > 0 and r.spec is not None
    assert gen_after - gen_before == sum(len(r.output_token_ids) for r in recs)

    # The cell's counters are exactly the /metrics delta read by hand …
    c = out.counters
    assert c is not None
    assert c == after - before
    # … and the sum of the per-request counters the server returned.
    assert sum((r.spec for r in recs if r.spec is not None), SpecCounters()) == c
    # Identities: per-position sums = accepted; τ = 1 + accepted / drafts.
    assert len(c.accepted_per_pos) == K
    assert sum(c.accepted_per_pos) == c.num_accepted_tokens
    assert c.num_draft_tokens == K * c.num_drafts
    assert tau(c) == 1 + c.num_accepted_tokens / c.num_drafts
    # Self-drafting accepts (nearly) everything: τ = 4 up to rare fp32 near-ties
    # between the draft pass and the verify pass of the random-weight model.
    assert 3.9 <= tau(c) <= K + 1  # type: ignore[operator]
    s = summarize_cell(recs, out.wall_time_s, counters=c, concurrency=bs)
    assert s.num_ok == 8 and s.tau_pooled == tau(c) and s.output_throughput and s.output_throughput > 0
    print(
        f"b{bs}: tau={tau(c):.3f} {c} tpot_p50={s.tpot.p50 * 1e3:.2f} ms thr={s.output_throughput:.0f} tok/s"
    )


def test_poisson_profile_with_warmup(engine: VllmServerEngine) -> None:
    before, _ = hand_read(engine.base_url)  # type: ignore[arg-type]
    recs: list[RequestRecord] = []
    prof = LoadProfile(request_rate=20.0, concurrency=4, warmup_requests=2, seed=1)
    out = engine.run_cell(_request(4, n_prompts=6, max_tokens=16, name="poisson"), recs.append, load=prof)
    after, _ = hand_read(engine.base_url)  # type: ignore[arg-type]
    assert len(recs) == 6 and all(r.error is None for r in recs)
    # Warmup requests ran before the cell's first scrape: not in its counters.
    assert out.counters == sum((r.spec for r in recs if r.spec is not None), SpecCounters())
    assert (after - before).num_drafts > out.counters.num_drafts  # type: ignore[union-attr]


def test_start_failure_is_clear(assets: Any, tmp_path: Path) -> None:
    target = str(assets.target)
    bogus = tmp_path / "no-such-model"
    bogus.mkdir()
    (bogus / "config.json").write_text(json.dumps({"model_type": "qwen3", "architectures": ["Nope"]}))
    m = MethodSpec(method="baseline")
    cfg = _config(target, m, None)
    kwargs = build_engine_kwargs(cfg, str(bogus), None)
    eng = VllmServerEngine(cfg, kwargs, tmp_path / "bad.log", ENV, start_timeout_s=180)
    t0 = time.monotonic()
    with pytest.raises(EngineUnavailable) as ei:
        eng.start()
    eng.close()
    print(f"start failure after {time.monotonic() - t0:.1f} s: {ei.value.reason}")
    assert "exited during start-up" in ei.value.reason and "['Nope']" in ei.value.reason
    assert not ei.value.skipped  # a bad checkpoint is a failure, not an unsupported configuration
    assert ei.value.log_tail
    assert (tmp_path / "bad.log").read_text().count("[specbench] starting:") == 1


def test_attach_checks_what_the_server_serves(
    engine: VllmServerEngine, assets: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attach mode against the module's server (draft_model, K=3): claims of another K, of no speculation or of
    another model are reported with their reason; the right claim passes. Engine level, then a whole suite."""
    from specbench import api
    from specbench.report.markdown import render_markdown
    from specbench.results import rundir

    target = str(assets.target)

    def attach(method: MethodSpec, spec: dict[str, Any] | None, model: str = target) -> VllmServerEngine:
        cfg = _config(model, method, spec)
        kwargs = build_engine_kwargs(cfg, model, target if spec else None)
        return VllmServerEngine(cfg, kwargs, tmp_path / "attach.log", ENV, base_url=engine.base_url)

    right = attach(MethodSpec(method="draft_model", num_speculative_tokens=K, speculator="target"),
                   {"method": "draft_model", "num_speculative_tokens": K})
    right.start()
    out = right.run_cell(_request(2, n_prompts=4, max_tokens=16, name="attach"), lambda r: None)
    assert out.counters is not None and out.counters.num_drafts > 0
    assert right.served["model_check"] == "ok" and right.served["metrics_check"] == "ok", right.served
    assert right.served["models"][0]["root"] == target
    assert right.describe()["served"] is right.served

    other_k = attach(MethodSpec(method="draft_model", num_speculative_tokens=2, speculator="target"),
                     {"method": "draft_model", "num_speculative_tokens": 2})
    other_k.start()
    with pytest.raises(CellFailed) as ei:
        other_k.run_cell(_request(2, n_prompts=4, max_tokens=16, name="attach"), lambda r: None)
    assert "claims K=2" in ei.value.reason and "show K=3" in ei.value.reason, ei.value.reason
    assert other_k.served["metrics_check"].startswith("mismatch")

    baseline = attach(MethodSpec(method="baseline"), None)
    baseline.start()
    with pytest.raises(CellFailed) as ei:
        baseline.run_cell(_request(2, n_prompts=4, max_tokens=16, name="attach"), lambda r: None)
    assert "no speculation (baseline)" in ei.value.reason and "K=3" in ei.value.reason, ei.value.reason

    with pytest.raises(EngineUnavailable) as eu:
        attach(MethodSpec(method="baseline"), None, model=str(tmp_path / "another-model")).start()
    assert "does not serve the suite's target" in eu.value.reason and "another-model" in eu.value.reason

    # A suite attached to the same server: each claim's verdict lands in cells.jsonl, the manifest and the report.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"def f{i}(x):"}) + "\n"
                                                    for i in range(4)))
    suite = tmp_path / "attach.yaml"
    suite.write_text(f"""
name: attach-it
targets:
  - name: tiny
    model: {target}
    engine: vllm-server
    base_url: {engine.base_url}
    max_model_len: 512
    chat_template: false
    methods:
      - method: baseline
      - method: draft_model
        name: dm-k2
        num_speculative_tokens: 2
        speculator: target
      - method: draft_model
        num_speculative_tokens: {K}
        speculator: target
datasets:
  - name: d
    kind: jsonl
    path: prompts.jsonl
sampling:
  temperatures: [0.0]
  max_tokens: 16
""")
    run_dir = api.run(suite, out=tmp_path / "results", platform="cpu")
    status = {c.cell_id.split("/")[1]: (c.status, c.reason or "") for c in rundir.read_cells(run_dir)}
    assert status["draft_model"][0] == "ok", status
    assert status["baseline"][0] == "failed" and "no speculation (baseline)" in status["baseline"][1], status
    assert status["dm-k2"][0] == "failed" and "claims K=2" in status["dm-k2"][1], status
    manifest = rundir.read_manifest(run_dir)
    checks = {e.key: e.describe.served["metrics_check"] for e in manifest.engines if e.describe}
    assert checks["tiny--draft_model"] == "ok" and checks["tiny--dm-k2"].startswith("mismatch"), checks
    report = render_markdown(api.load_summary(run_dir), manifest)
    assert "the suite claims K=2, the server's per-position counters show K=3" in report


def test_conversations_turn_by_turn_concurrency_counts_conversations(engine: VllmServerEngine, assets: Any) -> None:
    """Three two-turn conversations at concurrency 2 through the worker's entry for conversation cells: every
    turn is a record (conversation id, turn); each turn-2 prompt holds the same conversation's turn-1 reply from
    this server as the chat template renders it (by prompt length, which leaving the reply out changes); at
    most two conversations are under way at once, each sending turn 2 on its stream once turn 1 ended."""
    from transformers import AutoTokenizer

    from specbench.engines.vllm_offline import _render_chat
    from specbench.execution.conversations import run_conversations

    convs = {f"v{i}": ([{"role": "user", "content": f"hello {i}"}], f"and then {i}?") for i in range(3)}
    req = _request(2, max_tokens=16, name="conv").model_copy(update={"prompts": [
        PreparedPrompt(prompt_id=cid, messages=first, later_turns=[then]) for cid, (first, then) in convs.items()]})
    recs: list[RequestRecord] = []
    out = run_conversations(engine, req, recs.append)
    assert out.num_requests == len(recs) == 6 and all(r.error is None for r in recs), [r.error for r in recs]
    assert sorted((r.conversation_id, r.turn, r.conversation_turns, r.prompt_id) for r in recs) == sorted(
        [(c, 1, 2, c) for c in convs] + [(c, 2, 2, f"{c}.turn2") for c in convs])
    assert out.counters == sum((r.spec for r in recs if r.spec is not None), SpecCounters())  # one scrape, all turns
    tok = AutoTokenizer.from_pretrained(str(assets.target))
    by = {(r.conversation_id, r.turn): r for r in recs}
    spans = []
    for cid, (first, then) in convs.items():
        one, two = by[(cid, 1)], by[(cid, 2)]

        def length(reply: str, first: list = first, then: str = then) -> int:
            msgs = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": then}]
            return len(tok(_render_chat(tok, msgs, {}), add_special_tokens=False).input_ids)

        assert one.output_token_ids and two.prompt_tokens == length(one.output_text) > length(""), cid
        assert one.sent_offset_s is not None and two.sent_offset_s is not None and one.latency_s and two.latency_s
        assert two.sent_offset_s >= one.sent_offset_s + one.latency_s, cid  # one load: one clock for all turns
        spans.append((one.sent_offset_s, two.sent_offset_s + two.latency_s))
    # At each conversation's start: two under way (itself included), never three; the third waited for a slot.
    assert max(sum(s <= t < e - 1e-9 for s, e in spans) for t, _ in spans) == 2


def test_server_killed_mid_cell_then_restart(engine: VllmServerEngine, assets: Any, tmp_path: Path) -> None:
    """Runs last: kills the module's server (SIGKILL to its process group) while requests are in flight."""
    import threading

    recs: list[RequestRecord] = []
    timers: list[threading.Timer] = []
    started = time.monotonic()

    def emit(r: RequestRecord) -> None:
        recs.append(r)
        if not timers and sum(x.error is None for x in recs) == 3:
            # Both streams run in lockstep (same lengths): the third answer comes as the second pair
            # ends, so one pair lasts about (now - start) / 2. Kill a third of a pair's time later,
            # mid-generation of the next pair whatever the machine's speed (a fixed delay let a fast
            # machine finish every request first).
            pair_s = (time.monotonic() - started) / 2
            timers.append(threading.Timer(pair_s / 3, engine.kill))
            timers[0].start()

    req = _request(2, n_prompts=16, max_tokens=64, name="kill")
    with pytest.raises(CellFailed) as ei:
        engine.run_cell(req, emit)
    timers[0].join()
    exc = ei.value
    assert exc.engine_dead and "died" in exc.reason and exc.log_tail
    keys = [(r.prompt_id, r.sample_index) for r in recs]
    assert len(keys) == len(set(keys)), "a request was recorded twice"
    ok = [r for r in recs if r.error is None]
    failed = [r for r in recs if r.error is not None]
    assert len(ok) >= 3 and all(len(r.output_token_ids) == 64 for r in ok)
    # The requests in flight are kept, with error set and what they had received; none not sent is recorded.
    assert 1 <= len(failed) <= 2 and len(recs) < 16
    kinds = {r.error.split(":")[0] for r in failed}  # type: ignore[union-attr]
    assert kinds <= {"cancelled", "incomplete", "connection"}, kinds
    assert all(len(r.output_token_ids) < 64 for r in failed)
    print(f"killed: {len(ok)} ok, {len(failed)} failed {[r.error for r in failed]}; reason: {exc.reason}")

    # A dead engine refuses further cells at once; the runner closes it and starts a fresh one.
    with pytest.raises(CellFailed) as again:
        engine.run_cell(_request(1, n_prompts=2), lambda r: None)
    assert again.value.engine_dead
    engine.close()
    fresh = _engine(tmp_path / "fresh.log", assets)
    fresh.start()
    try:
        done = {k for k in keys}
        retry = req.model_copy(update={"skip": {(r.prompt_id, r.sample_index) for r in ok}})
        more: list[RequestRecord] = []
        out = fresh.run_cell(retry, more.append)
        assert out.num_requests == 16 - len(ok) == len(more)
        assert all(r.error is None for r in more)
        assert not (
            {(r.prompt_id, r.sample_index) for r in more} & {(r.prompt_id, r.sample_index) for r in ok}
        )
        assert {(r.prompt_id, r.sample_index) for r in more} | {
            (r.prompt_id, r.sample_index) for r in ok
        } >= done
        assert out.counters == sum((r.spec for r in more if r.spec is not None), SpecCounters())
    finally:
        fresh.close()


def test_request_rate_cell_end_to_end(assets: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A suite with one Poisson load (8 req/s, 12 requests), baseline and the target drafting for itself,
    through plan → runner → launched servers → records → summary → report. Starts its own two servers."""
    from specbench import api
    from specbench.engines.loadgen import poisson_offsets
    from specbench.results import rundir

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    rate, n = 8.0, 12
    rows = [{"id": f"q{i:02d}", "prompt": f"def f{i}(x):\n    return"} for i in range(n + 4)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = tmp_path / "rate.yaml"
    suite.write_text(f"""
name: rate-it
targets:
  - name: tiny
    model: {assets.target}
    engine: vllm-server
    max_model_len: 512
    chat_template: false
    methods:
      - method: baseline
      - method: draft_model
        num_speculative_tokens: {K}
        speculator: target
datasets:
  - name: d
    kind: jsonl
    path: prompts.jsonl
sampling:
  temperatures: [0.0]
  max_tokens: 64
load:
  request_rates: [{rate:g}]
  num_requests: {n}
""")
    t0 = time.monotonic()
    run_dir = api.run(suite, out=tmp_path / "results", platform="cpu")
    print(f"rate suite: {time.monotonic() - t0:.1f} s")

    plan = rundir.read_manifest(run_dir).plan
    plan_cells = plan.cells if plan else []
    assert sorted(c.cell_id for c in plan_cells) == ["tiny/baseline/d/T0/rate8/r0", "tiny/draft_model/d/T0/rate8/r0"]
    cells = rundir.read_cells(run_dir)
    assert sorted((c.cell_id, c.status) for c in cells) == [(c.cell_id, "ok") for c in sorted(plan_cells, key=lambda c: c.cell_id)]
    recs = rundir.read_requests(run_dir)
    prompt_order = [r["id"] for r in rows][:n]
    # The schedule every cell's sends must follow (sampling.seed 0, repeat 0).
    gen = poisson_offsets(rate, 0)
    want = [next(gen) for _ in range(n)]
    for c in plan_cells:
        mine = [r for r in recs if r.cell_id == c.cell_id]
        # Exactly once: one record per request sent, none missing, none twice, all complete.
        assert sorted(r.prompt_id for r in mine) == prompt_order
        assert all(r.error is None and len(r.output_token_ids) == 64 for r in mine), [r.error for r in mine]
        sent = {r.prompt_id: r.sent_offset_s for r in mine}
        err = [abs(sent[p] - w) for p, w in zip(prompt_order, want, strict=True)]  # type: ignore[operator]
        by_sent = sorted(mine, key=lambda r: r.sent_offset_s or 0.0)
        overlapped = sum(
            (b.sent_offset_s or 0.0) < (a.sent_offset_s or 0.0) + (a.latency_s or 0.0)
            for a, b in zip(by_sent, by_sent[1:], strict=False)
        )
        print(f"{c.method}: send error mean {sum(err) / n * 1e3:.1f} ms max {max(err) * 1e3:.1f} ms; "
              f"{overlapped} of {n - 1} sends while the previous request was still streaming")
        # Open loop: requests go out on the seeded schedule …
        assert sum(err) / n < 0.05 and max(err) < 0.25, err
        # … not when earlier ones complete: some were sent while the one before was still streaming.
        assert overlapped >= (n - 1) // 2
        cr = next(x for x in cells if x.cell_id == c.cell_id)
        assert cr.num_requests == n and cr.wall_time_s is not None and cr.wall_time_s >= want[-1] - 0.05
        if c.method == "draft_model":
            assert cr.counters == sum((r.spec for r in mine if r.spec is not None), SpecCounters())

    summary = api.load_summary(run_dir)
    g = summary.group("tiny/draft_model/d/T0/rate8")
    assert g is not None and g.request_rate == rate and g.status == "ok" and g.n_requests == n
    assert g.speedup is not None and g.speedup.value is not None  # paired with the baseline at 8 req/s
    assert g.tau is not None and g.tau.value is not None and 3.9 <= g.tau.value <= K + 1
    serving = summary.extra.serving
    sp = [r for r in serving if isinstance(r, ServingSpeedupRow) and r.metric == "tpot"]
    assert len(sp) == 1 and sp[0].request_rate == rate and sp[0].concurrency is None
    assert sp[0].n_method == sp[0].n_baseline == n
    cell_rows = [r for r in serving if isinstance(r, ServingCellRow)]
    assert {r.request_rate for r in cell_rows} == {rate} and all(r.num_ok == n for r in cell_rows)

    paths = api.report(run_dir, tmp_path / "reports")
    md = paths["markdown"].read_text()
    serving_md = md.split("## Serving", 1)[1]
    assert "Speedup over the baseline by request rate (Poisson arrivals) (95% intervals):" in serving_md
    assert "| Where | Method | Metric | 8 req/s |" in serving_md
    assert re.search(r"\| tiny · d \| draft_model \| tpot \| [0-9.]+× \[[0-9.]+, [0-9.]+\]", serving_md)
    assert "8 req/s" in paths["html"].read_text()
