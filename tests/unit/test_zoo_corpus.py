"""The zoo's corpus mix: batches split by weight, deterministic draws, and a cache key that follows it."""

from __future__ import annotations

import copy

import pytest
import torch

from specbench.zoo import CORPUS_MIX, train_config
from specbench.zoo.code_problems import code_texts
from specbench.zoo.corpus import SOURCES, mixed_windows, window_counts
from specbench.zoo.word_problems import TEMPLATES, word_problem


@pytest.mark.parametrize("n", [1, 7, 16, 64])
def test_window_counts_follow_the_weights(n):
    counts = window_counts(CORPUS_MIX["weights"], n)
    assert sum(counts.values()) == n
    total = sum(CORPUS_MIX["weights"].values())
    for s, k in counts.items():
        assert abs(k - n * CORPUS_MIX["weights"][s] / total) < 1
    assert window_counts({"python": 1.0, "math": 0.0}, 5) == {"python": 5}


def test_mixed_windows_are_deterministic_and_from_each_source():
    streams = {s: torch.arange(1000) + 10_000 * i for i, s in enumerate(SOURCES)}
    weights = {s: 1.0 for s in SOURCES}

    def draw(seed: int) -> torch.Tensor:
        return mixed_windows(streams, weights, 2 * len(SOURCES), 16, torch.Generator().manual_seed(seed))

    a = draw(0)
    assert a.shape == (2 * len(SOURCES), 16) and torch.equal(a, draw(0)) and not torch.equal(a, draw(1))
    sources = [int(row[0]) // 10_000 for row in a]
    assert sorted(sources) == sorted(2 * list(range(len(SOURCES))))  # two windows from each source
    assert all(torch.equal(row, torch.arange(int(row[0]), int(row[0]) + 16)) for row in a)  # contiguous


def test_word_problems_answer_what_they_ask():
    import random
    import re

    rng = random.Random(0)
    seen = set()
    for _ in range(400):
        q, a = word_problem(rng)
        lines = a.split("\n")
        assert q.endswith("?") and lines[-1].startswith("#### ")
        for expr, value in re.findall(r"<<([^=]+)=([^>]+)>>", a):  # every calculator step is right
            assert eval(expr) == float(value), (expr, value)  # noqa: S307 - our own arithmetic
        seen.add(q)
    assert len(TEMPLATES) >= 10 and len(seen) > 390  # hardly a question twice


def test_generated_functions_pass_their_own_doctests():
    """Every docstring example of a generated module is what its body returns, and modules vary."""
    import doctest
    import types

    texts = code_texts(split="train", n=60, seed=0)
    assert texts == code_texts(split="train", n=60, seed=0)
    assert not set(texts) & set(code_texts(split="heldout", n=60, seed=0))
    assert len(set(texts)) == len(texts)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for i, text in enumerate(texts):
        assert text.endswith("\n\n") and "<|endoftext|>" not in text  # joined back to back
        mod = types.ModuleType(f"generated{i}")
        exec(compile(text, f"<module {i}>", "exec"), mod.__dict__)  # noqa: S102 - our own generated code
        for test in doctest.DocTestFinder().find(mod):
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted >= 2 * 60


def test_the_cache_key_follows_the_recipe(monkeypatch):
    from specbench.zoo import assets

    base = assets.cache_key(0, assets.asset_config(train=True, quick=False))
    base_untrained = assets.cache_key(0, assets.asset_config(train=False, quick=False))  # its tokenizer
    mix = copy.deepcopy(CORPUS_MIX)
    mix["weights"]["math"] = mix["weights"].get("math", 0) + 0.5
    monkeypatch.setitem(CORPUS_MIX, "weights", mix["weights"])
    assert train_config()["target"]["mix"]["weights"] == mix["weights"]
    assert assets.cache_key(0, assets.asset_config(train=True, quick=False)) != base
    assert assets.cache_key(0, assets.asset_config(train=False, quick=False)) != base_untrained
