"""Load generator and attach-mode server engine against a fake loopback SSE server.

The fake speaks vLLM's streaming formats (completions and chat, with
``token_ids``, a final usage chunk carrying ``metrics.speculative_decoding``,
``/metrics``) and misbehaves on request: the prompt text selects HTTP errors,
stalls, dropped connections and error events.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.factories import cell
from support.fake_server import FakeServer

from specbench.config.plan import Cell, EngineConfig
from specbench.config.suite import MethodSpec, TargetSpec
from specbench.engines.loadgen import LoadProfile, poisson_offsets, run_load, run_warmup
from specbench.engines.prom import parse_metrics
from specbench.engines.protocol import CellFailed
from specbench.engines.server_startup import start_failure
from specbench.engines.stream_client import (
    RequestItem,
    build_item,
    make_session,
    stream_request,
    to_record,
    token_timing,
)
from specbench.engines.vllm_args import server_cli_args
from specbench.engines.vllm_server import VllmServerEngine
from specbench.results.counters import from_response
from specbench.results.records import RequestRecord, SpecCounters
from specbench.results.requests import CellRequest, PreparedPrompt, SamplingRequest, request_seed

K = 3


def _item(prompt: str, n: int = 6, pid: str = "p") -> RequestItem:
    p = PreparedPrompt(prompt_id=pid, text=prompt)
    return build_item(p, SamplingRequest(temperature=0.0, max_tokens=n), "fake-model")


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---------------------------------------------------------------------------
# the timing rule


def test_token_timing_spreads_multi_token_chunks() -> None:
    ttft, itl, lat = token_timing(10.0, [(10.5, 1), (10.8, 3), (11.0, 1), (11.2, 0)])
    assert ttft == pytest.approx(0.5)
    assert itl == pytest.approx([0.1, 0.1, 0.1, 0.2])
    assert lat == pytest.approx(1.0)
    assert sum(itl) == pytest.approx(lat - ttft)


def test_token_timing_first_chunk_extra_tokens_get_zero_gaps() -> None:
    ttft, itl, lat = token_timing(0.0, [(1.0, 3), (2.0, 2)])
    assert ttft == 1.0 and lat == 2.0
    assert itl == pytest.approx([0.0, 0.0, 0.5, 0.5])
    assert len(itl) == 5 - 1


def test_token_timing_no_tokens() -> None:
    assert token_timing(0.0, []) == (None, None, None)
    assert token_timing(0.0, [(1.0, 0)]) == (None, None, None)


def test_spec_counters_from_response_matches_chain_rule() -> None:
    sd = {"acceptance_histogram": [1, 2, 0, 3], "num_draft_tokens": 18, "num_spec_tokens": 3}
    c = from_response(sd, 3)
    assert c is not None
    assert c.num_drafts == 6
    assert c.num_accepted_tokens == 0 * 1 + 1 * 2 + 3 * 3
    assert c.accepted_per_pos == [5, 3, 3]
    assert sum(c.accepted_per_pos) == c.num_accepted_tokens
    assert from_response(None, 3) is None


def test_build_item_bodies() -> None:
    s = SamplingRequest(temperature=0.7, max_tokens=9, seed=3, logprobs=2, stop=["\n"])
    chat = build_item(
        PreparedPrompt(prompt_id="a", messages=[{"role": "user", "content": "hi"}]),
        s,
        "m",
        sample=1,
        repeat=2,
        chat_template_kwargs={"enable_thinking": False},
    )
    assert chat.path == "/v1/chat/completions"
    assert chat.body["return_token_ids"] is True and chat.body["stream"] is True
    assert chat.body["stream_options"] == {"include_usage": True}
    assert chat.body["top_logprobs"] == 2 and chat.body["logprobs"] is True
    assert chat.body["chat_template_kwargs"] == {"enable_thinking": False}
    assert chat.body["seed"] == request_seed(s, "a", 1, 2) == chat.seed
    comp = build_item(PreparedPrompt(prompt_id="b", text="x"), s, "m")
    assert comp.path == "/v1/completions" and comp.body["logprobs"] == 2 and comp.body["stop"] == ["\n"]


# ---------------------------------------------------------------------------
# streaming against the fake


@pytest.fixture
def server() -> Any:
    with FakeServer() as srv:
        yield srv


def test_completion_stream_counts_tokens_not_chunks() -> None:
    with FakeServer(gap_s=0.01, chunk=3) as srv:

        async def go() -> Any:
            async with make_session(1) as s:
                return await stream_request(s, srv.url, _item("hello", n=7), 10)

        res = _run(go())
    assert res.ok, res.error
    assert res.token_ids == [100, 101, 102, 103, 104, 105, 106]
    assert [n for _, n in res.chunks] == [1, 3, 3]
    ttft, itl, lat = res.timing()
    assert len(itl) == 6
    # Each 3-token chunk's gap (~10 ms, more on a busy machine) is spread evenly over its tokens.
    assert itl[0] == itl[1] == itl[2] and itl[3] == itl[4] == itl[5]
    assert 0 < itl[0] < 0.1 and 0 < itl[3] < 0.1
    assert sum(itl) == pytest.approx(lat - ttft)
    assert res.finish_reason == "length" and res.prompt_tokens == 5
    assert res.text.startswith("t100t101")
    rec = to_record(res, run_id="r", cell=CELL, engine_key="e", k=K)
    assert (
        rec.spec is not None
        and rec.spec.num_drafts == 7 // 3
        and rec.spec.num_accepted_tokens == 2 * (7 // 3)
    )


def test_chat_stream_and_logprobs(server: FakeServer) -> None:
    s = SamplingRequest(temperature=0.0, max_tokens=4, logprobs=2)
    item = build_item(
        PreparedPrompt(prompt_id="c", messages=[{"role": "user", "content": "hi"}]), s, "fake-model"
    )

    async def go() -> Any:
        async with make_session(1) as sess:
            return await stream_request(sess, server.url, item, 10)

    res = _run(go())
    assert res.ok, res.error
    assert res.token_ids == [100, 101, 102, 103]
    assert res.num_tokens == 4 and len(res.timing()[1]) == 3
    assert res.logprobs == [{i: -0.5, 7: -1.5} for i in res.token_ids]
    assert server.requests[-1]["messages"] == [{"role": "user", "content": "hi"}]


def test_completion_logprobs(server: FakeServer) -> None:
    item = build_item(
        PreparedPrompt(prompt_id="c", text="x"), SamplingRequest(temperature=0, max_tokens=3, logprobs=2), "m"
    )

    async def go() -> Any:
        async with make_session(1) as sess:
            return await stream_request(sess, server.url, item, 10)

    res = _run(go())
    assert res.logprobs == [{100: -0.5, 7: -1.5}, {101: -0.5, 7: -1.5}, {102: -0.5, 7: -1.5}]


def test_errors_are_recorded_never_dropped(server: FakeServer) -> None:
    items = [
        _item("ok", pid="ok"),
        _item("http500", pid="h"),
        _item("stall", pid="s"),
        _item("drop", pid="d"),
        _item("errevent", pid="e"),
    ]
    got: list[Any] = []

    async def go() -> Any:
        async with make_session(5) as sess:
            prof = LoadProfile(concurrency=5, request_timeout_s=1.0)
            return await run_load(sess, server.url, items, prof, got.append)

    report = _run(go())
    kinds = {r.item.prompt_id: r.error_kind for r in got}
    assert kinds == {"ok": None, "h": "http", "s": "timeout", "d": "incomplete", "e": "stream"}
    assert report.error_counts() == {"http": 1, "timeout": 1, "incomplete": 1, "stream": 1}
    assert len(report.results) == 5
    # Partial output is kept on the failed stream.
    assert next(r for r in got if r.item.prompt_id == "d").token_ids == [100, 101]
    assert "engine exploded" in next(r for r in got if r.item.prompt_id == "e").error


def test_fixed_concurrency_keeps_n_in_flight() -> None:
    with FakeServer(gap_s=0.005) as srv:
        items = [_item(f"q{i}", n=5, pid=f"q{i}") for i in range(12)]
        got: list[Any] = []

        async def go() -> Any:
            async with make_session(4) as sess:
                return await run_load(sess, srv.url, items, LoadProfile(concurrency=4), got.append)

        report = _run(go())
        assert srv.max_inflight == 4
    assert sorted(r.item.prompt_id for r in got) == sorted(f"q{i}" for i in range(12))
    assert all(r.ok for r in got) and report.not_sent == 0 and report.wall_time_s > 0


def test_num_requests_and_duration_bound_a_cell(server: FakeServer) -> None:
    items = [_item(f"q{i}", n=3, pid=f"q{i}") for i in range(50)]

    async def go(prof: LoadProfile) -> Any:
        async with make_session(2) as sess:
            return await run_load(sess, server.url, items, prof, lambda r: None)

    assert len(_run(go(LoadProfile(concurrency=2, num_requests=7))).results) == 7
    rep = _run(go(LoadProfile(concurrency=1, duration_s=0.05)))
    assert 1 <= len(rep.results) < 50 and rep.not_sent == 50 - len(rep.results)


def test_poisson_is_seeded_and_open_loop() -> None:
    import random

    rate, n = 50.0, 15

    def expected(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [rng.expovariate(rate) for _ in range(n)]

    with FakeServer(gap_s=0.05) as srv:  # requests outlive the gaps: open loop, not one at a time
        items = [_item(f"q{i}", n=2, pid=f"q{i}") for i in range(n)]

        async def go() -> Any:
            async with make_session(None) as sess:
                return await run_load(
                    sess, srv.url, items, LoadProfile(request_rate=rate, seed=7), lambda r: None
                )

        rep = _run(go())
        assert len(rep.results) == n and all(r.ok for r in rep.results)
        t = sorted(srv.arrivals)
        observed = [b - a for a, b in zip(t, t[1:], strict=False)]
        assert srv.max_inflight > 1
    # Arrival gaps follow the seeded exponential schedule (up to scheduling jitter) …
    want = expected(7)[1:]
    assert sum(abs(o - w) for o, w in zip(observed, want, strict=True)) / len(want) < 0.006
    # … which a different seed would not give.
    assert sum(abs(x - y) for x, y in zip(expected(7), expected(8), strict=True)) / n > 0.006


def test_abort_cancels_in_flight_and_records_each_once() -> None:
    with FakeServer(gap_s=0.02) as srv:
        items = [_item(f"q{i}", n=50, pid=f"q{i}") for i in range(10)]
        got: list[Any] = []

        async def go() -> Any:
            abort = asyncio.Event()
            asyncio.get_running_loop().call_later(0.15, abort.set)
            async with make_session(3) as sess:
                return await run_load(
                    sess, srv.url, items, LoadProfile(concurrency=3), got.append, abort=abort
                )

        rep = _run(go())
    assert rep.aborted is not None
    assert len(got) == 3 and len({r.item.prompt_id for r in got}) == 3
    assert all(r.error_kind == "cancelled" and r.token_ids for r in got)
    assert rep.not_sent == 7


def test_warmup_is_not_reported(server: FakeServer) -> None:
    items = [_item(f"q{i}", n=2, pid=f"q{i}") for i in range(3)]

    async def go() -> Any:
        async with make_session(2) as sess:
            warm = await run_warmup(sess, server.url, items, 5, 2, 10)
            rep = await run_load(sess, server.url, items, LoadProfile(concurrency=2), lambda r: None)
            return warm, rep

    warm, rep = _run(go())
    assert len(warm) == 5 and len(rep.results) == 3 and len(server.requests) == 8


# ---------------------------------------------------------------------------
# the engine in attach mode (no vLLM needed)


def _config(spec: bool = True) -> EngineConfig:
    t = TargetSpec(
        name="t", model="fake-model", engine="vllm-server", methods=[MethodSpec(method="baseline")]
    )
    m = (
        MethodSpec(method="draft_model", num_speculative_tokens=K, speculator="target")
        if spec
        else MethodSpec(method="baseline")
    )
    sc = {"method": "draft_model", "num_speculative_tokens": K} if spec else None
    return EngineConfig(
        key="t--m", target=t, method=m, vllm_method="draft_model" if spec else None, speculative_config=sc
    )


#: The attached engine's cell: a draft model at K, two requests in flight.
CELL = cell("m", "draft_model", K, batch_size=2)


def test_engine_attach_mode_counters_and_records(server: FakeServer, tmp_path: Path) -> None:
    eng = VllmServerEngine(
        _config(), {"model": "fake-model"}, tmp_path / "log", {}, base_url=server.url + "/"
    )
    eng.start()
    assert eng.model_name == "fake-model"
    prompts = [PreparedPrompt(prompt_id=f"p{i}", text=f"hello {i}") for i in range(5)]
    req = CellRequest(
        run_id="r",
        cell=CELL,
        prompts=prompts,
        sampling=SamplingRequest(temperature=0.0, max_tokens=8),
        skip={("p0", 0)},
    )
    recs: list[RequestRecord] = []
    out = eng.run_cell(req, recs.append, load=LoadProfile(concurrency=2, warmup_requests=2))
    eng.close()
    assert out.num_requests == 4 == len(recs)
    assert sorted(r.prompt_id for r in recs) == ["p1", "p2", "p3", "p4"]
    assert len(server.requests) == 6 and server.max_inflight <= 2
    per_request = sum((r.spec for r in recs if r.spec is not None), SpecCounters())
    # Warmup requests are excluded from the cell's counters.
    assert out.counters == per_request
    assert out.counters is not None and out.counters.num_drafts == 4 * (8 // 3)
    assert all(r.error is None and len(r.output_token_ids) == 8 and len(r.itl_s or []) == 7 for r in recs)
    assert eng.last_cell["errors"] == {}


def test_engine_attach_all_failed_fails_the_cell(server: FakeServer, tmp_path: Path) -> None:
    eng = VllmServerEngine(_config(spec=False), {"model": "m"}, tmp_path / "log", {}, base_url=server.url)
    eng.start()
    req = CellRequest(
        run_id="r",
        cell=CELL,
        prompts=[PreparedPrompt(prompt_id="x", text="http500")],
        sampling=SamplingRequest(temperature=0.0, max_tokens=4),
    )
    recs: list[RequestRecord] = []
    with pytest.raises(CellFailed, match="all 1 requests failed"):
        eng.run_cell(req, recs.append)
    assert len(recs) == 1 and recs[0].error is not None and recs[0].error.startswith("http: 500")


def test_engine_attach_unreachable(tmp_path: Path) -> None:
    from specbench.engines.protocol import EngineUnavailable
    from specbench.engines.server_startup import free_port

    eng = VllmServerEngine(
        _config(),
        {"model": "m"},
        tmp_path / "log",
        {},
        base_url=f"http://127.0.0.1:{free_port()}",
        start_timeout_s=1.0,
    )
    with pytest.raises(EngineUnavailable, match="did not answer /health"):
        eng.start()


def test_engine_runs_conversations_each_holding_a_stream(server: FakeServer, tmp_path: Path) -> None:
    """Concurrency counts conversations: at concurrency 2, three two-turn conversations run two at a time, each
    sending turn 2 (its history holding the server's own turn-1 reply) once its turn 1 ended; one whose turn 1
    failed ends there. A conversation's records are passed on together, in turn order."""
    from specbench.execution.conversations import run_conversations

    eng = VllmServerEngine(_config(), {"model": "fake-model"}, tmp_path / "log", {}, base_url=server.url)
    eng.start()
    assert eng.capabilities.multi_turn
    prompts = [PreparedPrompt(prompt_id=c, messages=[{"role": "user", "content": f"hi {c}"}], later_turns=[f"more {c}"])
               for c in ("a", "b", "c")]
    prompts.append(PreparedPrompt(prompt_id="bad", messages=[{"role": "user", "content": "http500"}],
                                  later_turns=["never"]))
    req = CellRequest(run_id="r", cell=CELL, prompts=prompts,
                      sampling=SamplingRequest(temperature=0.0, max_tokens=6))
    recs: list[RequestRecord] = []
    out = run_conversations(eng, req, recs.append)
    eng.close()
    assert out.num_requests == len(recs) == 7 and server.max_inflight <= 2
    order = [(r.conversation_id, r.turn, r.conversation_turns) for r in recs]
    assert sorted(order, key=lambda x: (x[0] or "", x[1] or 0)) == [
        ("a", 1, 2), ("a", 2, 2), ("b", 1, 2), ("b", 2, 2), ("bad", 1, 2), ("c", 1, 2), ("c", 2, 2)]
    assert all(order[i + 1] == (cid, 2, 2) for i, (cid, t, _) in enumerate(order) if t == 1 and cid != "bad")
    assert not any("never" in json.dumps(b) for b in server.requests)
    by = {(r.conversation_id, r.turn): r for r in recs}
    spans = []
    for c in ("a", "b", "c"):
        one, two = by[(c, 1)], by[(c, 2)]
        assert two.prompt_id == f"{c}.turn2" and one.error is None and two.error is None
        body = next(b for b in server.requests if b["messages"][-1]["content"] == f"more {c}")
        assert body["messages"] == [{"role": "user", "content": f"hi {c}"},
                                    {"role": "assistant", "content": one.output_text},
                                    {"role": "user", "content": f"more {c}"}]
        assert one.sent_offset_s is not None and two.sent_offset_s is not None and one.latency_s and two.latency_s
        assert two.sent_offset_s >= one.sent_offset_s + one.latency_s  # turn 2 after turn 1, on its stream
        spans.append((one.sent_offset_s, two.sent_offset_s + two.latency_s))
    # At no conversation's start are more than two conversations under way: the third waited for a slot.
    assert max(sum(s <= t < e - 1e-9 for s, e in spans) for t, _ in spans) == 2


# ---------------------------------------------------------------------------
# request-rate (Poisson) cells


def _rate_cell(rate: float, cap: int = 0, repeat: int = 0) -> Cell:
    return cell("m", "draft_model", K, batch_size=cap, repeat=repeat, request_rate=rate)


def _first(rate: float, seed: int, n: int) -> list[float]:
    gen = poisson_offsets(rate, seed)
    return [next(gen) for _ in range(n)]


def test_poisson_offsets_are_seeded_increasing_at_the_rate() -> None:
    a = _first(4.0, 11, 4000)
    assert a == _first(4.0, 11, 4000) and a != _first(4.0, 12, 4000)
    assert all(y > x for x, y in zip(a, a[1:], strict=False)) and a[0] > 0
    assert a[-1] / len(a) == pytest.approx(1 / 4.0, rel=0.06)  # mean gap 1/rate


def test_profile_for_cell_from_the_run_load() -> None:
    spec = LoadProfile(num_requests=12, duration_s=5.0, warmup_requests=2)
    p = LoadProfile.for_cell(_rate_cell(2.0, cap=3, repeat=1), spec, seed=5)
    assert (p.mode, p.request_rate, p.concurrency) == ("poisson", 2.0, 3)
    assert (p.num_requests, p.duration_s, p.warmup_requests) == (12, 5.0, 2)
    assert p.seed == 5 + 104729  # repeats get their own arrival sequence, reproducibly
    assert LoadProfile.for_cell(_rate_cell(2.0, cap=3, repeat=0), spec, seed=5).seed == 5
    assert LoadProfile.for_cell(_rate_cell(2.0, cap=0), spec).concurrency is None  # no cap
    closed = LoadProfile.for_cell(CELL.model_copy(update={"batch_size": 4}), spec)
    assert (closed.mode, closed.concurrency, closed.request_rate, closed.duration_s) == ("concurrency", 4, None, 5.0)
    # An engine default profile passes its bounds, timeout and seed on the same way.
    dflt = LoadProfile(num_requests=3, request_timeout_s=7.0, seed=9)
    p = LoadProfile.for_cell(_rate_cell(8.0, repeat=2), dflt)
    assert (p.request_rate, p.num_requests, p.request_timeout_s, p.seed) == (8.0, 3, 7.0, 9 + 2 * 104729)


def _rate_engine(srv: FakeServer, tmp_path: Path, load: LoadProfile) -> VllmServerEngine:
    eng = VllmServerEngine(_config(), {"model": "fake-model"}, tmp_path / "log", {}, base_url=srv.url, load=load)
    eng.start()
    return eng


def _prompts(n: int) -> list[PreparedPrompt]:
    return [PreparedPrompt(prompt_id=f"p{i:02d}", text=f"hello {i}") for i in range(n)]


def test_engine_rate_cell_sends_on_the_seeded_schedule(tmp_path: Path) -> None:
    rate, n, seed = 40.0, 12, 3
    with FakeServer(gap_s=0.02) as srv:  # a request takes ~0.2 s, arrivals are ~25 ms apart
        eng = _rate_engine(srv, tmp_path, LoadProfile(seed=seed))
        cell = _rate_cell(rate, repeat=1)
        req = CellRequest(run_id="r", cell=cell, prompts=_prompts(n),
                          sampling=SamplingRequest(temperature=0.0, max_tokens=10))
        recs: list[RequestRecord] = []
        out = eng.run_cell(req, recs.append)  # no explicit profile: the cell's rate drives it
        eng.close()
        assert srv.max_inflight > 1
    assert eng.last_cell["profile"]["request_rate"] == rate and eng.last_cell["profile"]["concurrency"] is None
    assert out.num_requests == n == len(recs) and len({r.prompt_id for r in recs}) == n
    assert all(r.error is None and r.sent_offset_s is not None for r in recs)
    sent = {r.prompt_id: r.sent_offset_s for r in recs}
    want = _first(rate, seed + 104729, n)  # the repeat is mixed into the seed
    err = [abs(sent[f"p{i:02d}"] - w) for i, w in enumerate(want)]  # type: ignore[operator]
    assert sum(err) / n < 0.01 and max(err) < 0.05, err
    # Open loop: requests went out while earlier ones were still streaming.
    order = sorted(recs, key=lambda r: r.sent_offset_s or 0.0)
    overlapped = sum(
        (b.sent_offset_s or 0) < (a.sent_offset_s or 0) + (a.latency_s or 0) for a, b in zip(order, order[1:], strict=False)
    )
    assert overlapped >= n // 2


def test_engine_rate_cell_capped_and_duration_bounded(tmp_path: Path) -> None:
    rate, seed = 40.0, 4
    want = _first(rate, seed, 30)
    with FakeServer(gap_s=0.02) as srv:
        eng = _rate_engine(srv, tmp_path, LoadProfile(seed=seed))
        req = CellRequest(run_id="r", cell=_rate_cell(rate, cap=2), prompts=_prompts(12),
                          sampling=SamplingRequest(temperature=0.0, max_tokens=10))
        recs: list[RequestRecord] = []
        eng.run_cell(req, recs.append)
        eng.close()
        assert srv.max_inflight == 2  # the cap holds …
    sent = sorted(r.sent_offset_s or 0.0 for r in recs)
    assert len(recs) == 12 and all(s >= w - 0.005 for s, w in zip(sent, want, strict=False))
    assert sent[-1] > want[11] + 0.1  # … so requests queue behind it and go out late

    # duration_s: nothing is sent once the deadline passed; put it in a wide gap of the schedule.
    k = max(range(2, 10), key=lambda i: want[i + 1] - want[i])
    deadline = (want[k] + want[k + 1]) / 2
    with FakeServer(gap_s=0.002) as srv:
        eng = _rate_engine(srv, tmp_path, LoadProfile(seed=seed, duration_s=deadline))
        req = CellRequest(run_id="r", cell=_rate_cell(rate), prompts=_prompts(30),
                          sampling=SamplingRequest(temperature=0.0, max_tokens=2))
        recs = []
        eng.run_cell(req, recs.append)
        eng.close()
    assert len(recs) == k + 1 and eng.last_cell["not_sent"] == 30 - (k + 1)


# ---------------------------------------------------------------------------
# server command line and start-up failures


def test_server_cli_args() -> None:
    args = server_cli_args(
        {
            "model": "/m",
            "seed": 0,
            "disable_log_stats": False,
            "enforce_eager": True,
            "trust_remote_code": False,
            "max_model_len": None,
            "speculative_config": {"method": "draft_model", "num_speculative_tokens": 3},
        }
    )
    assert args[:4] == ["--model", "/m", "--seed", "0"]
    assert (
        "--disable-log-stats" not in args and "--enforce-eager" in args and "--no-trust-remote-code" in args
    )
    assert "--max-model-len" not in args
    i = args.index("--speculative-config")
    assert json.loads(args[i + 1]) == {"method": "draft_model", "num_speculative_tokens": 3}


def test_start_failure_classification() -> None:
    log = (
        "WARNING 01-01 cpu.py:1] Pin memory is not supported on CPU, falling back\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: Model Runner V1 does not support: dspark speculative decoding\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    reason, unsupported = start_failure(log)
    assert unsupported and "dspark" in reason
    reason, unsupported = start_failure(
        "Traceback\nValueError: bad value\nRuntimeError: Engine core failed\n"
    )
    assert not unsupported and reason == "RuntimeError: Engine core failed"
    reason, unsupported = start_failure("WARNING something is not supported on CPU, falling back\nKilled\n")
    assert not unsupported and reason == "Killed"
    # A bad checkpoint is a failure, not a skip; pydantic's message is on the next line.
    log = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, Model architectures ['Nope'] are not supported for now. Supported architectures: "
        + "x" * 2000
        + "\n    For further information visit https://errors.pydantic.dev/2.14/v/value_error\n"
    )
    reason, unsupported = start_failure(log)
    assert not unsupported and "Model architectures ['Nope']" in reason and len(reason) <= 400


def test_parse_metrics_of_fake_matches(server: FakeServer) -> None:
    import urllib.request

    with urllib.request.urlopen(server.url + "/metrics") as r:
        snap = parse_metrics(r.read().decode())
    assert snap.spec == SpecCounters(accepted_per_pos=[0, 0, 0])


# ---------------------------------------------------------------------------
# launch mode: process group, Ctrl-C, death mid-cell (a fake server subprocess)

FAKE_SERVER = r"""
import asyncio, json, subprocess, sys, time
from aiohttp import web

port, mode = int(sys.argv[1]), sys.argv[2]
print("fake server starting", flush=True)
if mode == "unsupported":
    print("Traceback (most recent call last):", flush=True)
    print("ValueError: Model Runner V1 does not support: dspark speculative decoding", flush=True)
    sys.exit(1)
# A grandchild in the same process group, like vLLM's EngineCore.
core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"core pid {core.pid}", flush=True)

async def completions(request):
    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(int(body["max_tokens"])):
        await asyncio.sleep(0.02)
        fin = "length" if i + 1 == int(body["max_tokens"]) else None
        ch = {"choices": [{"index": 0, "text": "x", "token_ids": [i], "finish_reason": fin}]}
        await resp.write(b"data: " + json.dumps(ch).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp

app = web.Application()
app.router.add_post("/v1/completions", completions)
app.router.add_get("/health", lambda r: web.Response(text=""))
app.router.add_get("/metrics", lambda r: web.Response(text=""))
app.router.add_get("/v1/models", lambda r: web.json_response({"data": [{"id": "fake"}]}))
time.sleep(0.3)
web.run_app(app, host="127.0.0.1", port=port, print=None)
"""


class _FakeLaunch(VllmServerEngine):
    mode = "ok"

    def server_command(self, port: int) -> list[str]:
        script = self.log_path.parent / "fake_server.py"
        script.write_text(FAKE_SERVER)
        return [sys.executable, str(script), str(port), self.mode]


def _core_pid(log: Path) -> int:
    for _ in range(100):
        m = re.search(r"core pid (\d+)", log.read_text())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError("no core pid in log")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie (exited, not yet reaped by its dead parent's reaper) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _launch(tmp_path: Path, mode: str = "ok") -> _FakeLaunch:
    eng = _FakeLaunch(_config(spec=False), {"model": "fake"}, tmp_path / "server.log", {}, start_timeout_s=30)
    eng.mode = mode
    return eng


def test_launch_close_stops_the_whole_process_group(tmp_path: Path) -> None:
    eng = _launch(tmp_path)
    eng.start()
    assert eng.base_url and eng.base_url.startswith("http://127.0.0.1:") and eng.model_name == "fake"
    pid, core = eng.pid, _core_pid(tmp_path / "server.log")
    assert pid is not None and os.getpgid(core) == pid  # own process group, grandchild included
    assert "[specbench] starting:" in (tmp_path / "server.log").read_text()
    eng.close()
    assert _wait_gone(pid) and _wait_gone(core)


def test_launch_unsupported_is_skipped(tmp_path: Path) -> None:
    from specbench.engines.protocol import EngineUnavailable

    eng = _launch(tmp_path, "unsupported")
    with pytest.raises(EngineUnavailable) as ei:
        eng.start()
    assert (
        ei.value.skipped
        and "dspark" in ei.value.reason
        and "fake server starting" in (ei.value.log_tail or "")
    )
    assert eng.pid is None


def test_launch_ctrl_c_mid_cell_then_close(tmp_path: Path) -> None:
    eng = _launch(tmp_path)
    eng.start()
    pid, core = eng.pid, _core_pid(tmp_path / "server.log")
    assert pid is not None
    prompts = [PreparedPrompt(prompt_id=f"p{i}", text="x") for i in range(6)]
    req = CellRequest(
        run_id="r", cell=CELL, prompts=prompts, sampling=SamplingRequest(temperature=0, max_tokens=50)
    )
    recs: list[RequestRecord] = []
    # Ctrl-C as in a terminal: Python's default handler (an earlier test in this process,
    # e.g. one importing vLLM in-process, may have left its own SIGINT handler installed,
    # and asyncio only turns SIGINT into cancellation when the default handler is in place).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.4, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))  # type: ignore[arg-type]
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            eng.run_cell(req, recs.append)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)
        eng.close()  # what the runner's ``finally`` does
    assert _wait_gone(pid) and _wait_gone(core)
    assert recs == []  # all were in flight: cut short by the stop, so not recorded (a resume sends them)


def test_launch_sigterm_mid_cell_stops_within_moments(tmp_path: Path) -> None:
    """A run's stop (StopRequested from SIGTERM) reaches the caller while uvloop runs the load;
    completed requests are recorded, those cut short are not; close ends the process group."""
    from specbench.engines import procs
    from specbench.execution.interrupt import StopRequested, stop_on_signals

    eng = _launch(tmp_path)
    eng.start()
    pid, core = eng.pid, _core_pid(tmp_path / "server.log")
    assert pid is not None and any(f"pid {pid}" in n for n in procs.LIVE.names())
    prompts = [PreparedPrompt(prompt_id=f"p{i}", text="x") for i in range(8)]
    req = CellRequest(
        run_id="r", cell=CELL, prompts=prompts, sampling=SamplingRequest(temperature=0, max_tokens=15)
    )
    recs: list[RequestRecord] = []
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        with pytest.raises(StopRequested) as ei, stop_on_signals():
            timer.start()
            t0 = time.monotonic()
            try:
                eng.run_cell(req, recs.append)
            finally:
                stopped_after = time.monotonic() - t0
    finally:
        timer.join()
        eng.close()
    assert ei.value.signame == "SIGTERM" and stopped_after < 3.0
    assert _wait_gone(pid) and _wait_gone(core) and not any(f"pid {pid}" in n for n in procs.LIVE.names())
    keys = [(r.prompt_id, r.sample_index) for r in recs]
    assert len(recs) < len(prompts) and len(keys) == len(set(keys)) and all(r.error is None for r in recs)


def test_end_all_kills_a_server_left_running(tmp_path: Path) -> None:
    """A stop during an engine's start or close: what is left is killed, grandchild included."""
    from specbench.engines import procs

    eng = _launch(tmp_path)
    eng.start()
    pid, core = eng.pid, _core_pid(tmp_path / "server.log")
    procs.end_all()
    assert _wait_gone(pid) and _wait_gone(core)
    eng.close()


def test_launch_server_death_fails_cell_keeps_records(tmp_path: Path) -> None:
    eng = _launch(tmp_path)
    eng.start()
    prompts = [PreparedPrompt(prompt_id=f"p{i}", text="x") for i in range(8)]
    req = CellRequest(
        run_id="r", cell=CELL, prompts=prompts, sampling=SamplingRequest(temperature=0, max_tokens=10)
    )
    recs: list[RequestRecord] = []
    timer: list[threading.Timer] = []

    def emit(r: RequestRecord) -> None:
        recs.append(r)
        if len(recs) == 2 and not timer:
            timer.append(threading.Timer(0.1, eng.kill))
            timer[0].start()

    with pytest.raises(CellFailed) as ei:
        eng.run_cell(req, emit)
    timer[0].join()
    eng.close()
    assert ei.value.engine_dead and "died" in ei.value.reason
    ok = [r for r in recs if r.error is None]
    failed = [r for r in recs if r.error is not None]
    assert len(ok) == 2 and all(len(r.output_token_ids) == 10 for r in ok)
    assert len(failed) == 2 and all(0 < len(r.output_token_ids) < 10 for r in failed)
    assert len({r.prompt_id for r in recs}) == len(recs) == 4  # the 4 never sent are not recorded
    assert "not sent" in ei.value.reason


def test_request_seeds_differ_across_prompts_samples_and_repeats():
    """Sample s of two prompts must not share a random stream (correlated PIT values)."""
    s = SamplingRequest(temperature=1.0, max_tokens=8, seed=0)
    seeds = {request_seed(s, f"p{i}", j, r) for i in range(50) for j in range(8) for r in range(3)}
    assert len(seeds) == 50 * 8 * 3
    assert all(0 <= x < 2**31 for x in seeds)
    assert request_seed(s, "p1", 2, 0) == request_seed(s, "p1", 2, 0)  # deterministic
