"""The dataset kinds' modules, one per name of :data:`specbench.config.dataset_kinds.KINDS`."""

from __future__ import annotations

from specbench.config.dataset_kinds import KINDS
from specbench.config.suite import DatasetSpec
from specbench.datasets import chat_jsonl, gsm8k, humaneval, jsonl, spec_bench, speed_bench
from specbench.datasets.base import KindModule

REGISTRY: dict[str, KindModule] = {
    m.kind.name: m
    for m in (gsm8k.MODULE, humaneval.MODULE, spec_bench.MODULE, speed_bench.MODULE, jsonl.MODULE, chat_jsonl.MODULE)
}
assert set(REGISTRY) == set(KINDS), "every dataset kind has one module"


def module_of(spec: DatasetSpec | str) -> KindModule:
    """The module of a dataset's kind (or of a kind's name)."""
    return REGISTRY[spec if isinstance(spec, str) else spec.kind]
