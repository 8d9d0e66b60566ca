"""The SPEED-Bench loader on a fixture of its schema written here (no SPEED-Bench text is
shipped or read): categories, sub-categories, entropy tiers and turns kept; placeholder rows
refused with a message saying how to prepare the data; a local file read with no hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.config.suite import DatasetSpec
from specbench.datasets import DatasetError, prepare, speed_bench

QUALITATIVE = [
    {"question_id": "q-1", "category": "coding", "sub_category": "python", "turns": ["Write a loop.", "Now in C."],
     "source": "fixture", "src_id": "1", "difficulty": "easy", "multiturn": True},
    {"question_id": "q-2", "category": "math", "sub_category": "algebra", "turns": ["Solve x + 1 = 2."],
     "source": "fixture", "src_id": "2", "difficulty": "medium", "multiturn": False},
    {"question_id": "q-3", "category": "roleplay", "sub_category": "fantasy", "turns": ["Be a dragon."],
     "source": "fixture", "src_id": "3", "difficulty": "hard", "multiturn": False},
]
THROUGHPUT = [
    {"question_id": f"t-{i}", "category": tier, "sub_category": "long", "turns": [f"context {i} " * 50],
     "source": "fixture", "src_id": str(i), "difficulty": "", "multiturn": False}
    for i, tier in enumerate(["low_entropy", "mixed", "high_entropy"])
]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_local_file_is_read_with_its_categories_and_turns_and_no_hub(tmp_path: Path, no_hub):
    f = _write(tmp_path / "qualitative.jsonl", QUALITATIVE)
    spec = DatasetSpec(name="sb", kind="speed_bench", config="qualitative", path=str(f))
    prompts = prepare(spec, tmp_path)
    assert [p.prompt_id for p in prompts] == ["speed_bench-qualitative-q-1", "speed_bench-qualitative-q-2",
                                              "speed_bench-qualitative-q-3"]
    assert [p.meta["category"] for p in prompts] == ["coding", "math", "roleplay"]
    assert [p.meta["sub_category"] for p in prompts] == ["python", "algebra", "fantasy"]
    assert [p.meta["turns"] for p in prompts] == [2, 1, 1]
    assert prompts[0].messages == [{"role": "user", "content": "Write a loop."}]  # the first turn is sent
    assert all(p.meta["entropy_tier"] is None for p in prompts)


def test_throughput_rows_keep_their_entropy_tier_and_nominal_length(tmp_path: Path, no_hub):
    f = _write(tmp_path / "throughput_2k.jsonl", THROUGHPUT)
    prompts = prepare(DatasetSpec(name="t", kind="speed_bench", config="throughput_2k", path=str(f)), tmp_path)
    assert [p.meta["entropy_tier"] for p in prompts] == ["low_entropy", "mixed", "high_entropy"]
    assert {p.meta["nominal_input_tokens"] for p in prompts} == {2000}


def test_categories_and_limit_select_rows(tmp_path: Path, no_hub):
    f = _write(tmp_path / "q.jsonl", QUALITATIVE)
    spec = DatasetSpec(name="sb", kind="speed_bench", config="qualitative", path=str(f), categories=["math", "roleplay"],
                       limit=1)
    assert [p.meta["category"] for p in prepare(spec, tmp_path)] == ["math"]


def test_a_prepared_file_with_messages_and_parquet_reads_the_same(tmp_path: Path, no_hub):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{**{k: v for k, v in r.items() if k != "turns"},
             "messages": [{"role": "user", "content": t} for t in r["turns"]]} for r in QUALITATIVE]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "q.parquet")
    spec = DatasetSpec(name="sb", kind="speed_bench", config="qualitative", path=str(tmp_path / "q.parquet"))
    prompts = prepare(spec, tmp_path)
    assert [p.meta["turns"] for p in prompts] == [2, 1, 1]
    assert prompts[1].messages[-1]["content"] == "Solve x + 1 = 2."


def test_placeholder_rows_are_refused_with_how_to_prepare_the_data(tmp_path: Path, no_hub):
    held = {**QUALITATIVE[1], "question_id": "q-9",
            "turns": [f"{speed_bench.PLACEHOLDER}\n\nSummarize: {{article}}"]}
    f = _write(tmp_path / "hub-copy.jsonl", [*QUALITATIVE, held])
    with pytest.raises(DatasetError) as info:
        prepare(DatasetSpec(name="sb", kind="speed_bench", config="qualitative", path=str(f)), tmp_path)
    msg = str(info.value)
    assert "1 of 4 rows" in msg and "placeholders" in msg and "q-9" in msg
    assert "preparation script" in msg and "path:" in msg


def test_a_file_of_another_schema_is_named(tmp_path: Path, no_hub):
    f = _write(tmp_path / "other.jsonl", [{"prompt": "hi"}])
    with pytest.raises(DatasetError, match="is this a SPEED-Bench file"):
        prepare(DatasetSpec(name="sb", kind="speed_bench", config="qualitative", path=str(f)), tmp_path)
