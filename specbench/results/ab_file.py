"""The A/B result file of an A/B run, ``ab.json`` (its model: specbench.analysis.ab_rounds.ABResult).

``specbench ab`` writes it once its rounds end; every figure in it is recomputed from the run's
``records.jsonl`` and ``cells.jsonl`` by :func:`specbench.analysis.ab_rounds.ab_result`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

AB_FILE = "ab.json"
AB_SUMMARY = "ab.md"  # the Markdown summary (a pull-request comment)
M = TypeVar("M", bound=BaseModel)


def is_ab_run(run_dir: Path) -> bool:
    return (Path(run_dir) / AB_FILE).is_file()


def write_ab(run_dir: Path, result: BaseModel, markdown: str) -> Path:
    for name, text in ((AB_FILE, result.model_dump_json(indent=2) + "\n"), (AB_SUMMARY, markdown)):
        path = Path(run_dir) / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return Path(run_dir) / AB_FILE


def read_ab(run_dir: Path, model: type[M]) -> M:
    return model.model_validate_json((Path(run_dir) / AB_FILE).read_text())
