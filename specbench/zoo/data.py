"""Text without the hub: Python standard-library sources, split by file.

The corpus is every ``*.py`` file under ``sysconfig.get_paths()["stdlib"]``
except site-packages, test suites and IDLE, in sorted (deterministic) order.
A file is held out (never trained on; used for evaluation prompts) when the
SHA-1 of its relative path falls in the held-out bucket, so the split is
stable when files are added or removed.
"""

from __future__ import annotations

import functools
import hashlib
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_SKIP_PARTS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"})
HELDOUT_BUCKETS = 10  # one file in ten (by path hash) is held out


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(split: str = "train", root: Path | None = None) -> list[Path]:
    """Standard-library sources of one split ("train", "heldout" or "all"), sorted."""
    if split not in ("train", "heldout", "all"):
        raise ValueError(f"split must be 'train', 'heldout' or 'all', got {split!r}")
    root = root or stdlib_root()
    out = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if _SKIP_PARTS.intersection(rel.parts) or not f.is_file():
            continue
        held = is_heldout(rel.as_posix())
        if split == "all" or (split == "heldout") == held:
            out.append(f)
    return out


def is_heldout(rel_path: str) -> bool:
    return hashlib.sha1(rel_path.encode()).digest()[0] % HELDOUT_BUCKETS == 0


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def iter_texts(split: str = "train", root: Path | None = None) -> Iterator[str]:
    for f in stdlib_files(split, root):
        text = read_text(f)
        if text.strip():
            yield text


def corpus_fingerprint(root: Path | None = None) -> str:
    """A short hash of the corpus file list and sizes (part of the asset cache key).

    Computed once per process and root (walking the standard library takes
    seconds on a busy machine, and every engine of a run resolves its assets).
    """
    return _fingerprint(root or stdlib_root())


@functools.lru_cache(maxsize=4)
def _fingerprint(root: Path) -> str:
    h = hashlib.sha256()
    for f in stdlib_files("all", root):
        h.update(f"{f.relative_to(root).as_posix()}:{f.stat().st_size}\n".encode())
    return h.hexdigest()[:16]


def heldout_prompts(tok, n: int = 16, prompt_tokens: int = 48, seed: int = 0) -> list[list[int]]:
    """``n`` prompts of ``prompt_tokens`` token ids from held-out files (deterministic).

    Each prompt is a window starting at the beginning of a line, taken from a
    different held-out file where possible.
    """
    import random

    rng = random.Random(seed)
    files = stdlib_files("heldout")
    rng.shuffle(files)
    out: list[list[int]] = []
    for f in files * 4:
        if len(out) >= n:
            break
        text = read_text(f)
        starts = [i + 1 for i, c in enumerate(text) if c == "\n" and text[i + 1 : i + 2].strip()]
        if not starts:
            continue
        s = rng.choice(starts)
        ids = tok(text[s : s + 8 * prompt_tokens], add_special_tokens=False)["input_ids"]
        if len(ids) >= prompt_tokens:
            out.append(ids[:prompt_tokens])
    return out


_STREAMS: dict[tuple[int, str], torch.Tensor] = {}


def token_stream(tok, split: str = "train") -> torch.Tensor:
    """Every file of ``split`` tokenized and joined with ``<|endoftext|>`` (a 1-D LongTensor).

    Memoised per tokenizer object and split (the zoo tokenizes the corpus once).
    """
    import torch

    key = (id(tok), split)
    if key in _STREAMS:
        return _STREAMS[key]

    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    texts = list(iter_texts(split))
    encs = tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    ids: list[int] = []
    for e in encs:
        ids.extend(e.ids)
        ids.append(eos)
    if len(_STREAMS) > 8:
        _STREAMS.clear()
    _STREAMS[key] = torch.tensor(ids, dtype=torch.long)
    return _STREAMS[key]


def random_windows(stream: torch.Tensor, n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` windows of ``length`` tokens at random offsets of ``stream`` → ``[n, length]``."""
    import torch

    starts = torch.randint(0, stream.numel() - length, (n,), generator=gen)
    return torch.stack([stream[s : s + length] for s in starts.tolist()])
