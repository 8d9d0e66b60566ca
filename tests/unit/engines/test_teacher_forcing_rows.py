"""The teacher-forcing worker's dense rows: vLLM's arrays (kept as handed over) and its per-position
containers give the same ``(generated tokens, vocabulary)`` matrix."""

from __future__ import annotations

import numpy as np

from specbench.engines.vllm_offline import DensePromptLogprobs, _flat_rows


class _Logprob:
    def __init__(self, logprob: float):
        self.logprob = logprob


def _engine_rows(rng: np.random.Generator, n_rows: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows as vLLM's engine core builds them: the scored token first, then every token by descending logprob."""
    lps = np.log(rng.dirichlet(np.ones(vocab), size=n_rows)).astype(np.float32)
    scored = rng.integers(0, vocab, size=n_rows)
    order = np.argsort(-lps, axis=1, kind="stable")
    ids = np.concatenate([scored[:, None], order], axis=1)
    return ids, np.take_along_axis(lps, ids, axis=1)


def test_kept_arrays_and_per_position_containers_give_the_same_rows() -> None:
    rng = np.random.default_rng(0)
    vocab, n_prompt, n_gen = 7, 5, 4
    ids, lps = _engine_rows(rng, n_prompt + n_gen - 1, vocab)
    per_position = [None] + [
        {int(t): _Logprob(float(v)) for t, v in zip(ids[r], lps[r], strict=True)} for r in range(len(ids))
    ]
    # chunked as a chunked prefill hands them over
    dense = DensePromptLogprobs([(ids[:3], lps[:3]), (ids[3:], lps[3:])])
    want = _flat_rows(per_position, n_prompt, n_gen, vocab)
    got = _flat_rows(dense, n_prompt, n_gen, vocab)
    assert got.shape == (n_gen, vocab)
    assert np.array_equal(got, want)
    # row j scores generated token j: the prompt row n_prompt - 1 + j of the engine's arrays
    row = n_prompt - 1
    assert np.array_equal(got[0], lps[row][1:][np.argsort(ids[row][1:])])


def test_missing_rows_are_an_error_not_a_short_matrix() -> None:
    rng = np.random.default_rng(1)
    ids, lps = _engine_rows(rng, 4, 5)
    try:
        _flat_rows(DensePromptLogprobs([(ids, lps)]), 3, 4, 5)
    except ValueError as exc:
        assert "rows" in str(exc)
    else:
        raise AssertionError("a short matrix was returned")
