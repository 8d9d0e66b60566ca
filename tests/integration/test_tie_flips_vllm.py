"""Greedy flips from real vLLM output, classified against the dtype's tolerance (issue 13).

Two engines on the untrained zoo target (random weights: near-flat logits, so numerical
noise flips greedy choices often): the baseline in float32 recording its top-20 logprobs,
and the target drafting for itself (K=3) in bfloat16. Every output that differs from the
baseline is a numerical flip by construction (same weights, speculation is lossless), so
the classifier must call each a near-tie (gap within bfloat16's tolerance) or, at worst,
unverifiable, never divergent; and the same flips judged with the float32 tolerance show
why the dtype matters. Hand-built records in tests/unit/analysis/test_tie_tolerance.py check that a
real divergence is still caught.
"""

from __future__ import annotations

import pytest

from specbench.analysis.equivalence import greedy_equivalence
from specbench.analysis.lossless_greedy import DEFAULT_TIE_TOLERANCE, TIE_TOLERANCE_BY_DTYPE

SUITE = """
name: tie-flips
targets:
  - {name: tiny, model: tiny, assets: untrained, dtype: float32, max_model_len: 512, chat_template: false,
     methods: [{method: baseline}, {name: self-draft, method: draft_model, speculator: target, num_speculative_tokens: 3}]}
datasets: [{name: humaneval, kind: humaneval, limit: 16}]
sampling: {temperatures: [0.0], max_tokens: 48, seed: 0}
load: {batch_sizes: [8]}
warmup: false
equivalence: {greedy: true, logprobs: 20}
"""


@pytest.fixture(scope="module")
def flips(tmp_path_factory):
    """Records of both engines (the method's engine switched to bfloat16) and their reported dtypes."""
    from specbench import datasets
    from specbench.config.plan import expand
    from specbench.config.suite import load_suite
    from specbench.engines.factory import resolve_engine
    from specbench.engines.vllm_offline import VllmOfflineEngine
    from specbench.execution.driver import sampling_for
    from specbench.results.requests import CellRequest

    d = tmp_path_factory.mktemp("tie-flips")
    (d / "suite.yaml").write_text(SUITE)
    suite = load_suite(d / "suite.yaml")
    plan = expand(suite)
    prompts = datasets.prepare(suite.datasets[0], d, chat=False)
    records, dtypes = [], {}
    for cfg in plan.engines:
        if cfg.method.method != "baseline":
            cfg = cfg.model_copy(update={"target": cfg.target.model_copy(update={"dtype": "bfloat16"})})
        res = resolve_engine(cfg, "cpu")
        engine = VllmOfflineEngine(cfg, res.engine_kwargs, d / f"{cfg.key}.log", res.env)
        engine.start()
        try:
            dtypes[cfg.key] = engine.dtype
            for cell in plan.cells_for(cfg.key):
                req = CellRequest(run_id="x", cell=cell, prompts=prompts, sampling=sampling_for(expand(suite).decisions(), cell))
                engine.run_cell(req, records.append)
        finally:
            engine.close()
    return plan.cells, records, dtypes


@pytest.mark.integration
def test_engines_report_the_dtype_they_ran(flips):
    _, _, dtypes = flips
    assert dtypes == {"tiny--baseline": "float32", "tiny--self-draft": "bfloat16"}


@pytest.mark.integration
def test_bf16_flips_are_near_ties_within_bf16_tolerance(flips):
    cells, records, dtypes = flips
    (g,) = [v["greedy"] for v in greedy_equivalence(cells, records, engine_dtypes=dtypes, max_examples=100).values()]
    tol = TIE_TOLERANCE_BY_DTYPE["bfloat16"]
    assert (g["tie_tolerance"], g["tolerance_from"], g["dtypes"]) == (tol, "bfloat16", ["bfloat16", "float32"])
    assert g["n"] == 16 and g["n_unpaired"] == 0
    flipped = g["first_divergences"]
    assert len(flipped) == g["n"] - g["n_identical"] >= 1, "no flip appeared: the test shows nothing"
    for f in flipped:
        assert f["gap"] is not None, f
        if f["kind"] == "near_tie":
            assert not f["gap_is_bound"] and f["gap"] <= tol, f
        else:  # the method's token outside the top-20: only a lower bound, which must not prove a divergence
            assert f["kind"] == "unverifiable" and f["gap_is_bound"] and f["gap"] <= tol, f
    assert g["n_divergent"] == 0 and g["verdict"] != "divergent", g
    assert g["near_tie_gaps"] == sorted(f["gap"] for f in flipped if f["kind"] == "near_tie")


@pytest.mark.integration
def test_the_same_flips_judged_at_float32_tolerance(flips):
    """With float32's 1e-3 nats, flips whose gap exceeds it are called divergent: what
    every bf16 GPU run would have reported before the tolerance followed the dtype."""
    cells, records, dtypes = flips
    strict = next(iter(greedy_equivalence(cells, records, tie_tolerance=DEFAULT_TIE_TOLERANCE).values()))["greedy"]
    loose = next(iter(greedy_equivalence(cells, records, engine_dtypes=dtypes).values()))["greedy"]
    assert strict["n_identical"] == loose["n_identical"]
    over = [x for x in loose["near_tie_gaps"] if x > DEFAULT_TIE_TOLERANCE]
    assert over, f"no bf16 flip above float32's tolerance here: {loose['near_tie_gaps']}"
    # Each of them, and nothing else, turns divergent (same first divergence, same gap).
    assert strict["divergent_gaps"] == pytest.approx(sorted(over))
    assert strict["n_near_tie"] == loose["n_near_tie"] - len(over)
