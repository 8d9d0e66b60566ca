"""The engines a headline block starts together (HeadlineBlocks._chunks): every chunk restarts the reference's
engines, so the methods are packed beside them as full as the resident cap allows."""

from __future__ import annotations

from types import SimpleNamespace

from specbench.execution.headline_blocks import HeadlineBlocks


def _job(label: str, family: str) -> SimpleNamespace:
    cell = SimpleNamespace(method_family=family)
    return SimpleNamespace(engine=SimpleNamespace(config=SimpleNamespace(method=SimpleNamespace(label=label))),
                           cells=[SimpleNamespace(request=SimpleNamespace(cell=cell))], name=label)


def _chunks(jobs: list[SimpleNamespace], cap: int) -> list[list[str]]:
    blocks = HeadlineBlocks.__new__(HeadlineBlocks)
    blocks.reference = "eagle3"
    return [[j.name for j in chunk] for chunk in blocks._chunks(jobs, cap)]


REFS = [_job("eagle3-k1", "eagle3"), _job("eagle3-k3", "eagle3")]
METHODS = [_job(m, m.split("-k")[0]) for m in ("ngram", "p-eagle-k1", "p-eagle-k3", "dflash-k1", "dflash-k3")]


def test_all_engines_together_when_they_fit():
    assert _chunks(REFS + METHODS, 7) == [[j.name for j in REFS + METHODS]]


def test_methods_packed_beside_the_reference_as_the_cap_allows():
    # cap 4: the two reference engines and two methods a chunk, three chunks (not five of one method each)
    assert _chunks(REFS + METHODS, 4) == [["eagle3-k1", "eagle3-k3", "ngram", "p-eagle-k1"],
                                           ["eagle3-k1", "eagle3-k3", "p-eagle-k3", "dflash-k1"],
                                           ["eagle3-k1", "eagle3-k3", "dflash-k3"]]


def test_a_pair_that_does_not_fit_still_gets_one_method_a_chunk():
    # cap 2 with two reference engines: one method a chunk (the block then takes turns, sleep mode on a GPU)
    assert _chunks(REFS + METHODS[:2], 2) == [["eagle3-k1", "eagle3-k3", "ngram"],
                                              ["eagle3-k1", "eagle3-k3", "p-eagle-k1"]]
