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

``specbench validate`` reads a local file as the run does (pyarrow only for parquet) and names
every placeholder or malformed row by its line (jsonl) or row number (parquet).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from specbench.config.dataset_kinds import SPEED_BENCH, DatasetKind
from specbench.config.suite import DatasetSpec
from specbench.datasets.base import (
    DataCheck,
    DatasetError,
    KindModule,
    Row,
    RowError,
    as_prompt,
    field_of,
    formatted,
)
from specbench.results.requests import PreparedPrompt

HUB_ID = str(SPEED_BENCH.hub_id)
#: Config → nominal input tokens (None: the qualitative split has no fixed length).
CONFIGS = SPEED_BENCH.configs or {}
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
    """A prepared SPEED-Bench parquet file (jsonl files are read like every dataset's); pyarrow is imported here only."""
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


class SpeedBench(KindModule):
    kind: ClassVar[DatasetKind] = SPEED_BENCH

    def rows(self, spec: DatasetSpec, base_dir: Path, bad: list[str] | None = None) -> list[Row]:
        """The rows; for a run (no ``bad``) the whole file is refused when it holds placeholders."""
        if spec.path is None and spec.source != "hub":
            raise DatasetError(f"dataset {spec.name!r}: SPEED-Bench is not shipped; " + prepare_hint(_config(spec)))
        rows = super().rows(spec, base_dir, bad)
        if bad is None:
            where = str(spec.path) if spec.path is not None else f"{HUB_ID} ({_config(spec)})"
            try:
                check_rows([r.data for r in rows], _config(spec), where)
            except SpeedBenchError as exc:
                raise DatasetError(f"dataset {spec.name!r}: {exc}") from None
        return rows

    def file_rows(self, path: Path, bad: list[str] | None) -> list[Row]:
        if path.suffix != ".parquet":
            return super().file_rows(path, bad)
        try:
            data = read_parquet(path)
        except Exception as exc:  # pyarrow's errors: not a parquet file, a broken one
            if bad is None:
                raise DatasetError(f"{path}: cannot be read as parquet ({exc})") from None
            bad.append(f"{path}: cannot be read as parquet ({exc})")
            return []
        return [Row(f"{path}: row {i + 1}", r) for i, r in enumerate(data)]

    def hub_id(self, spec: DatasetSpec) -> tuple[str | None, str | None]:
        return HUB_ID, _config(spec)

    def hub_rows(self, spec: DatasetSpec) -> list[Row]:
        return [Row(f"{HUB_ID} ({_config(spec)}): row {i + 1}", r)
                for i, r in enumerate(load_hub(_config(spec), spec.split))]

    def prompt(self, spec: DatasetSpec, row: Row, index: int, chat: bool) -> PreparedPrompt:
        config = _config(spec)
        qid = field_of(row, "question_id")
        field_of(row, "category")
        try:
            turns = turns_of(row.data)
        except (SpeedBenchError, KeyError, TypeError, AttributeError) as exc:
            raise RowError(f"turns: {exc}") from None
        if not turns:
            raise RowError("no user turn")
        if is_placeholder(row.data):
            raise RowError(f"question {qid}: a placeholder turn ({PLACEHOLDER!r}): the public copy leaves this "
                           "text out")
        content = formatted(spec.prompt_template or "{question}", question=turns[0])
        return as_prompt(spec, chat, f"speed_bench-{config}-{qid}", content, None, row_meta(row.data, config))

    def check_prompts(self, spec: DatasetSpec, rows: list[Row], out: DataCheck) -> int:
        built = super().check_prompts(spec, rows, out)
        if any("a placeholder turn" in p for p in out.problems):
            out.add(f"dataset {spec.name!r}: " + prepare_hint(_config(spec)))
        return built

    def plan_line(self, spec: DatasetSpec) -> str | None:
        where = spec.path or f"the hub ({HUB_ID}; placeholder rows are refused: prepare the data)"
        return (f"{spec.name}: SPEED-Bench {spec.config} from {where}; the first user turn of each row is sent "
                "(multi-turn rows: only their first turn until conversations are supported)")


def _config(spec: DatasetSpec) -> str:
    return spec.config or "qualitative"


MODULE = SpeedBench()
