"""NVIDIA SPEED-Bench (``kind: speed_bench``): read, check, keep its slices.

SPEED-Bench has a ``qualitative`` config (11 categories × 80 prompts) and
throughput configs at about 1k, 2k, 8k, 16k and 32k input tokens (counted by
its preparation script with tiktoken's ``o200k_base``), each in three entropy
tiers. Every row has ``question_id``, ``category``, ``sub_category``,
``turns`` (the user turns), ``source``, ``src_id``, ``difficulty`` and
``multiturn``. A throughput row's ``category`` is its entropy tier.

Where rows come from: ``source: hub`` reads ``nvidia/SPEED-Bench`` through
``datasets``; ``path:`` reads the file its preparation script writes (jsonl,
``.gz`` allowed, or parquet; turns as ``turns`` or as user ``messages``).
The public copy holds placeholder turns wherever a source's licence keeps
the text out; those rows are refused with a message that says how to prepare
the data. The text is under NVIDIA's evaluation licence: specbench ships none
of it (its tests write their own rows of the same schema).

Multi-turn rows: only the first user turn is sent until conversations are
supported; the meta records how many turns the row has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbench.config.suite import SPEED_BENCH_CONFIGS

HUB_ID = "nvidia/SPEED-Bench"
#: Config → nominal input tokens (None: the qualitative split has no fixed length).
CONFIGS = SPEED_BENCH_CONFIGS
PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
LICENCE = "NVIDIA evaluation dataset licence (not shipped with specbench)"


class SpeedBenchError(ValueError):
    pass


def prepare_hint(config: str) -> str:
    return (
        f"prepare the data first: run SPEED-Bench's preparation script (named on the dataset card, "
        f"https://huggingface.co/datasets/{HUB_ID}: NVIDIA Model-Optimizer's examples/specdec_bench, or "
        f"NeMo-Skills' speed-bench prepare.py) for config {config!r}; it fetches each source under its own "
        f"licence and writes a file with the full turns; then give the dataset 'path: <that file>' "
        f"instead of 'source: hub'"
    )


def turns_of(row: dict[str, Any]) -> list[str]:
    """The user turns of a row: ``turns``, or the user ``messages`` of a prepared file."""
    if "turns" in row and row["turns"] is not None:
        return [str(t) for t in row["turns"]]
    if "messages" in row and row["messages"] is not None:
        return [str(m["content"]) for m in row["messages"] if m.get("role", "user") == "user"]
    raise SpeedBenchError(f"row {row.get('question_id')!r} has neither 'turns' nor 'messages'")


def is_placeholder(row: dict[str, Any]) -> bool:
    return any(PLACEHOLDER in t for t in turns_of(row))


def check_rows(rows: list[dict[str, Any]], config: str, where: str) -> None:
    """Refuse placeholder rows and rows without the schema's fields."""
    if not rows:
        raise SpeedBenchError(f"{where}: no rows")
    missing = [k for k in ("question_id", "category") if k not in rows[0]]
    if missing:
        raise SpeedBenchError(f"{where}: rows lack {', '.join(missing)}; is this a SPEED-Bench file?")
    held = [r for r in rows if is_placeholder(r)]
    if held:
        ids = ", ".join(str(r.get("question_id")) for r in held[:3])
        raise SpeedBenchError(
            f"{where}: {len(held)} of {len(rows)} rows of SPEED-Bench {config} are placeholders "
            f"({PLACEHOLDER!r}; e.g. {ids}): the public copy leaves out text whose source must be fetched; "
            + prepare_hint(config)
        )


def read_parquet(path: Path) -> list[dict[str, Any]]:
    """A prepared SPEED-Bench parquet file (jsonl files are read like every dataset's)."""
    import pyarrow.parquet as pq

    return [dict(r) for r in pq.read_table(path).to_pylist()]


def load_hub(config: str, split: str = "test") -> list[dict[str, Any]]:
    from datasets import load_dataset  # the real hub path, for users who have it

    return [dict(r) for r in load_dataset(HUB_ID, config, split=split)]


def entropy_tier(row: dict[str, Any], config: str) -> str | None:
    """A throughput row's entropy tier (its category); None in the qualitative split."""
    return None if CONFIGS.get(config) is None else row.get("category")


def row_meta(row: dict[str, Any], config: str) -> dict[str, Any]:
    """What a prepared prompt keeps of a row (for slices in the report)."""
    turns = turns_of(row)
    return {
        "category": row.get("category"),
        "sub_category": row.get("sub_category"),
        "entropy_tier": entropy_tier(row, config),
        "difficulty": row.get("difficulty"),
        "turns": len(turns),
        "speed_bench_config": config,
        "nominal_input_tokens": CONFIGS.get(config),
    }


def first_turn(row: dict[str, Any]) -> str:
    return turns_of(row)[0]
