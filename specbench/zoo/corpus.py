"""The zoo's training mix: standard-library Python, generated functions, and chat-templated questions and answers.

Sources (``SOURCES``): ``python`` (:mod:`specbench.zoo.data`'s standard-library files, joined with
``<|endoftext|>``), ``funcs`` (:mod:`specbench.zoo.code_problems`' generated modules, joined back to
back) and the chat sources of :mod:`specbench.zoo.chat_corpus` (``math``, ``code``, ``prose``;
conversations joined back to back). Each source is tokenized into its own stream; a batch takes a
fixed number of random windows from each, in proportion to the mix's weights, so every batch has
the same composition and the whole draw is deterministic from the generator's seed.

A mix is a ``{"weights": {source: weight}, "chat_docs": n}`` mapping (part of the zoo's training
configuration, hence of its cache key).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

SOURCES = ("python", "funcs", "math", "code", "prose")
RAW_SOURCES = ("python", "funcs")  # plain text, not conversations
TOKENIZER_SEED = 0  # the chat text the tokenizer is trained on does not depend on the zoo's seed

_STREAMS: dict[tuple[int, str, str, int, int], torch.Tensor] = {}


def chat_sources(mix: Mapping[str, Any]) -> list[str]:
    return [s for s in SOURCES if s not in RAW_SOURCES and mix["weights"].get(s, 0) > 0]


def generated_texts(source: str, split: str, *, n: int, seed: int) -> list[str]:
    """``n`` documents of a generated source (``funcs`` or a chat source), deterministic from ``seed``."""
    from specbench.zoo.chat_corpus import chat_texts
    from specbench.zoo.code_problems import code_texts

    return code_texts(split=split, n=n, seed=seed) if source == "funcs" else chat_texts(source, split=split, n=n, seed=seed)


def training_texts(mix: Mapping[str, Any]) -> Iterator[str]:
    """The training split's text of every source in ``mix`` (what the tokenizer is trained on)."""
    from specbench.zoo.data import iter_texts

    yield from iter_texts("train")
    for source in SOURCES[1:]:
        if mix["weights"].get(source, 0) > 0:
            yield from generated_texts(source, "train", n=mix["chat_docs"], seed=TOKENIZER_SEED)


def source_stream(tok, source: str, split: str, *, docs: int, seed: int) -> torch.Tensor:
    """One source's ``split`` tokenized into a 1-D LongTensor (memoised per tokenizer object)."""
    import torch

    from specbench.zoo.data import token_stream

    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if source == "python":
        return token_stream(tok, split)
    key = (id(tok), source, split, docs, seed)
    if key not in _STREAMS:
        eos = tok.convert_tokens_to_ids("<|endoftext|>")
        ids = [eos]
        # Generated modules and conversations are joined without an end-of-text token: after a
        # function or a reply the target goes on writing (another one) rather than stopping early.
        texts = generated_texts(source, split, n=docs, seed=seed)
        for e in tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False):
            ids.extend(e.ids)
        if len(_STREAMS) > 16:
            _STREAMS.clear()
        _STREAMS[key] = torch.tensor(ids, dtype=torch.long)
    return _STREAMS[key]


def streams(tok, mix: Mapping[str, Any], split: str, *, seed: int) -> dict[str, torch.Tensor]:
    """The stream of every source with a positive weight in ``mix``."""
    return {
        s: source_stream(tok, s, split, docs=mix["chat_docs"], seed=seed)
        for s in SOURCES
        if mix["weights"].get(s, 0) > 0
    }


def window_counts(weights: Mapping[str, float], n: int) -> dict[str, int]:
    """``n`` windows split across sources in proportion to ``weights`` (largest remainder)."""
    live = {s: float(w) for s, w in weights.items() if w > 0}
    total = sum(live.values())
    exact = {s: n * w / total for s, w in live.items()}
    counts = {s: int(x) for s, x in exact.items()}
    for s in sorted(live, key=lambda s: counts[s] - exact[s])[: n - sum(counts.values())]:
        counts[s] += 1
    return counts


def mixed_windows(
    streams_: Mapping[str, torch.Tensor], weights: Mapping[str, float], n: int, length: int, gen: torch.Generator
) -> torch.Tensor:
    """``n`` windows of ``length`` tokens, drawn from each source as ``weights`` say → ``[n, length]``."""
    import torch

    from specbench.zoo.data import random_windows

    parts = [random_windows(streams_[s], k, length, gen) for s, k in window_counts(weights, n).items() if k]
    return torch.cat(parts)
