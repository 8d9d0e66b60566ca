"""The greedy near-tie tolerance follows the engines' dtype (issue 13), on hand-built records.

A bfloat16 flip a few hundredths of a nat from the top is numerical noise; the float32
tolerance would call it divergent. A real divergence (nats away) stays divergent whatever
the dtype. Pure: no engine.
"""

from __future__ import annotations

import json

import pytest
from support.factories import cell, request
from support.paths import RECORDED

from specbench.analysis.equivalence import equivalence_summaries, greedy_equivalence
from specbench.analysis.lossless_greedy import TIE_TOLERANCE_BY_DTYPE, canonical_dtype, tie_tolerance_for
from specbench.config.plan import Cell
from specbench.config.suite import EquivalenceSpec
from specbench.results import rundir
from specbench.results.manifest import EngineDescription, EngineEntry
from specbench.results.records import RequestRecord


def _rec(cell: Cell, pid: str, ids: list[int], lps=None) -> RequestRecord:
    return request(cell, pid, tokens=ids, run_id="x", prompt_tokens=3, logprobs=lps)


BASE, METHOD = cell("baseline"), cell("m", "draft_model", 3)
# Position 1: tokens 3 and 4 are 0.06 nats apart (a bf16 near-tie); position 0: token 2 is 2.9 nats down.
LPS = [{1: -0.1, 2: -3.0}, {3: -0.66, 4: -0.72, 9: -4.0}, {5: -0.2, 6: -2.0}]


def _records(real_divergence: bool) -> list[RequestRecord]:
    recs = [
        _rec(BASE, "p0", [1, 3, 5], LPS), _rec(METHOD, "p0", [1, 3, 5]),  # identical
        _rec(BASE, "p1", [1, 3, 5], LPS), _rec(METHOD, "p1", [1, 4, 5]),  # flip, gap 0.06
    ]
    if real_divergence:
        recs += [_rec(BASE, "p2", [1, 3, 5], LPS), _rec(METHOD, "p2", [2, 3, 5])]  # gap 2.9
    return recs


def test_dtype_names_and_the_coarser_side_decides():
    assert canonical_dtype("torch.bfloat16") == canonical_dtype("bf16") == "bfloat16"
    assert canonical_dtype("auto") is None and canonical_dtype(None) is None
    assert tie_tolerance_for(["float32", "bfloat16"]) == (TIE_TOLERANCE_BY_DTYPE["bfloat16"], "bfloat16")
    assert tie_tolerance_for(["torch.float32", None]) == (1e-3, "float32")
    tol, why = tie_tolerance_for(["auto", None])
    assert tol == 1e-3 and "unknown" in why


@pytest.mark.parametrize(("dtype", "kind"), [("bfloat16", "near_tie"), ("float32", "divergent")])
def test_a_bf16_sized_flip_is_a_near_tie_only_in_bf16(dtype: str, kind: str):
    out = greedy_equivalence([BASE, METHOD], _records(False), engine_dtypes={"t--m": dtype, "t--baseline": dtype})
    g = out[METHOD.group_id]["greedy"]
    assert g["tie_tolerance"] == TIE_TOLERANCE_BY_DTYPE[dtype] and g["tolerance_from"] == dtype
    assert g["dtypes"] == [dtype, dtype]
    assert (g["n_identical"], g["n_near_tie"], g["n_divergent"]) == ((1, 1, 0) if kind == "near_tie" else (1, 0, 1))
    gaps = g["near_tie_gaps"] if kind == "near_tie" else g["divergent_gaps"]
    assert gaps == [pytest.approx(0.06)]
    assert g["verdict"] == ("equivalent" if kind == "near_tie" else "divergent")


def test_a_real_divergence_is_caught_in_bf16_too():
    out = greedy_equivalence([BASE, METHOD], _records(True), engine_dtypes={"t--m": "bfloat16"})
    g = out[METHOD.group_id]["greedy"]
    assert g["verdict"] == "divergent" and g["n_divergent"] == 1 and g["n_near_tie"] == 1
    assert g["divergent_gaps"] == [pytest.approx(2.9)]
    assert g["first_divergences"][0]["prompt_id"] == "p2"


def test_the_suite_can_override_the_tolerance(tmp_path):
    spec = EquivalenceSpec(greedy=True, tie_tolerance=0.01)
    out = equivalence_summaries(tmp_path, [BASE, METHOD], _records(False), engine_dtypes={"t--m": "bfloat16"}, spec=spec)
    g = out[METHOD.group_id].greedy
    assert g is not None and g.tie_tolerance == 0.01 and g.tolerance_from and g.tolerance_from.startswith("suite")
    assert g.n_divergent == 1
    json.dumps({gid: eq.model_dump(mode="json") for gid, eq in out.items()})


def test_engine_dtypes_prefer_what_the_engine_reported():
    recorded = RECORDED
    manifest = rundir.read_manifest(recorded)
    assert manifest.plan is not None
    a, b = (e.key for e in manifest.plan.engines[:2])
    manifest.plan.engines[0].target.dtype = "auto"
    manifest.engines = [EngineEntry(key=a, describe=EngineDescription(dtype="bfloat16")),
                        EngineEntry(key=b, status="skipped")]
    dtypes = manifest.engine_dtypes()
    assert dtypes[a] == "bfloat16" and dtypes[b] == manifest.plan.engines[1].target.dtype == "float32"
    assert set(dtypes) == {e.key for e in manifest.plan.engines}
