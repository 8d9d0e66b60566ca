"""Speed rounds on real vLLM CPU engines (issue 22): a two-engine suite run with ``rounds: 2`` and again with
``rounds: 1``. The rounds run records each request's round (the first half of the prompts in round 0), keeps
both engines up and alternates them (the manifest's timeline: both engines' cells in each half of the cell
time), rests its speed intervals on 2 rounds, and leaves every output and every request's τ counters exactly
as the run without rounds has them. Two engine starts of the tiny model: the second run takes both over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specbench import api
from specbench.results import rundir

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _suite(rounds: int) -> dict:
    """cpu-tour's tiny target (the trained one) with its baseline and EAGLE-3 at K=3: 4 GSM8k prompts, greedy, batch 2."""
    smoke = yaml.safe_load((REPO / "suites" / "cpu-tour.yaml").read_text())
    tiny = next(t for t in smoke["targets"] if t["name"] == "tiny")
    methods = [m for m in tiny["methods"] if m["method"] in ("baseline", "eagle3")]
    for m in methods:
        if "num_speculative_tokens" in m:
            m["num_speculative_tokens"] = 3
    return {"name": f"rounds-{rounds}", "targets": [{**tiny, "methods": methods}],
            "datasets": [{"name": "gsm8k", "kind": "gsm8k", "limit": 4}],
            "sampling": {"temperatures": [0], "max_tokens": 16}, "load": {"batch_sizes": [2]},
            "warmup": False, "rounds": rounds}


def _run(tmp: Path, rounds: int, kept) -> Path:
    suite = tmp / f"rounds{rounds}.yaml"
    suite.write_text(yaml.safe_dump(_suite(rounds)))
    return api.run(suite, out=tmp / f"out{rounds}", keep=kept)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, kept_engines):
    """The run with rounds starts both engines; the run without takes them over (kept between runs)."""
    tmp = tmp_path_factory.mktemp("rounds")
    return _run(tmp, 2, kept_engines), _run(tmp, 1, kept_engines)


def test_rounds_are_recorded_and_engines_alternate(runs) -> None:
    with_rounds, _ = runs
    recs = list(rundir.read_requests(with_rounds))
    assert len(recs) == 8 and all(r.error is None for r in recs)  # 4 prompts × 2 engines, each once
    for engine in ("tiny--baseline", "tiny--eagle3"):
        mine = [r for r in recs if r.engine_key == engine]
        assert sorted(r.prompt_id for r in mine) == sorted({r.prompt_id for r in mine})  # no prompt repeated
        assert sorted(r.round for r in mine) == [0, 0, 1, 1]  # a batch of 2 per round
    # The same prompts in the same round for both engines (what the pairing relies on).
    assert {(r.prompt_id, r.round) for r in recs if r.engine_key == "tiny--baseline"} == {
        (r.prompt_id, r.round) for r in recs if r.engine_key == "tiny--eagle3"}
    manifest = json.loads((with_rounds / "manifest.json").read_text())
    assert manifest["suite"]["rounds"] == 2
    cells = sorted((s for s in manifest["timeline"] if s["phase"] == "cells"), key=lambda s: s["start"])
    starts = [s for s in manifest["timeline"] if s["phase"] == "engine_start"]
    assert len(starts) == 2 and max(s["end"] for s in starts) <= cells[0]["start"] + 1  # both up before round 0
    assert len(cells) == 4  # one span per engine per round
    assert {s["engine"] for s in cells[:2]} == {s["engine"] for s in cells[2:]} == {"tiny--baseline", "tiny--eagle3"}


def test_rounds_leave_outputs_and_tau_unchanged_and_speed_rests_on_rounds(runs) -> None:
    with_rounds, without = runs

    def by_request(run: Path) -> dict:
        return {(r.engine_key, r.prompt_id): (r.output_token_ids, None if r.spec is None else r.spec.model_dump())
                for r in rundir.read_requests(run)}

    a, b = by_request(with_rounds), by_request(without)
    assert a.keys() == b.keys() and a == b  # every output and every request's τ counters, to the last token
    sa, sb = api.load_summary(with_rounds), api.load_summary(without)
    ga = {g.group_id: g for g in sa.groups}
    for g in sb.groups:
        assert ga[g.group_id].tau == g.tau
    eagle = ga["tiny/eagle3/gsm8k/T0/b2"]
    assert eagle.speedup is not None and eagle.speedup.rounds == 2 and eagle.speedup.method == "round bootstrap"
    assert eagle.output_tps is not None and eagle.output_tps.rounds == 2
    assert all(g.speedup is None or g.speedup.rounds is None for g in sb.groups)
