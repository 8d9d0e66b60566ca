"""Dataset kinds are a registry (issue 33): named once in ``config/dataset_kinds.py``, one module
each in ``specbench/datasets`` (loader, prompts, data check, dry-run line), and scoring and analysis
ask a kind what it is instead of comparing names."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from support.factories import request
from support.paths import PACKAGE

from specbench.analysis.cell_stopper import measurable
from specbench.config.dataset_kinds import GSM8K, KINDS, Scorer
from specbench.config.stop_rule import StopRule
from specbench.datasets import DESCRIPTIONS
from specbench.datasets.base import KindModule
from specbench.datasets.registry import REGISTRY, module_of
from specbench.results.records import RequestRecord
from specbench.scoring import apply

#: Where a kind may be spelled: its declaration and the kinds' own modules.
OWNERS = (PACKAGE / "config" / "dataset_kinds.py", PACKAGE / "datasets")


def test_every_kind_has_one_module_and_every_module_a_kind():
    assert list(REGISTRY) == list(KINDS)
    for name, module in REGISTRY.items():
        assert isinstance(module, KindModule) and module.kind is KINDS[name]
        assert type(module).__module__ == f"specbench.datasets.{name}"  # one module per kind, named after it
    assert DESCRIPTIONS == {k: v.description for k, v in KINDS.items()}
    with pytest.raises(KeyError):
        module_of("gsm9k")


def _kind_names_spelled(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string literal that is exactly a kind's name."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in KINDS]


def test_kind_names_are_spelled_only_by_their_declaration_and_their_modules():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == OWNERS[0] or OWNERS[1] in path.parents:
            continue
        offenders += [f"{path.relative_to(PACKAGE)}:{line}: {name!r}"
                      for line, name in _kind_names_spelled(path.read_text(encoding="utf-8"))]
    assert not offenders, "compare a kind's properties (config.dataset_kinds), not its name:\n" + "\n".join(offenders)


def test_the_scan_sees_a_planted_name_comparison():
    assert _kind_names_spelled('if kind == "humaneval":\n    pass\n') == [(1, "humaneval")]
    assert _kind_names_spelled('ok = d.kind in ("gsm8k",)\n') == [(1, "gsm8k")]


def _record(cell: str, prompt: str, text: str) -> RequestRecord:
    return request(cell, prompt, tokens=[1, 2], prompt_tokens=3, output_text=text)


def test_scoring_and_the_stop_rule_follow_the_declared_scorer(monkeypatch):
    """A made-up kind declared with the answer scorer is scored like GSM8k and can stop on accuracy;
    with no scorer it is neither -- nothing else names the kind."""
    answer = replace(GSM8K, name="my_math", title="my math")
    unscored = replace(GSM8K, name="my_chat", title="my chat", scorer=None)
    kinds = {**KINDS, answer.name: answer, unscored.name: unscored}
    monkeypatch.setattr(apply, "KINDS", kinds)
    monkeypatch.setattr("specbench.analysis.cell_stopper.KINDS", kinds)
    records = [_record("c1", "p", "so #### 42"), _record("c2", "p", "so #### 42")]
    scores, _ = apply.score_requests(records, {"c1": "m", "c2": "u"}, {"m": "my_math", "u": "my_chat"},
                                     {("m", "p"): "#### 42", ("u", "p"): "#### 42"}, allow_code_exec=False)
    assert set(scores) == {("c1", "p", 0)} and scores["c1", "p", 0]["strict"] is True
    rule = StopRule(metric="accuracy", rel_half_width=0.1)
    assert measurable(rule, speculative=True, has_baseline=True, dataset_kind="my_math") is None
    assert "in-process" in str(measurable(rule, speculative=True, has_baseline=True, dataset_kind="my_chat"))
    assert GSM8K.scorer is Scorer.ANSWER and KINDS["humaneval"].scorer is Scorer.EXECUTION


def test_an_unknown_kind_is_named_with_the_closest_and_the_valid_ones(tmp_path: Path):
    from specbench.config.suite import SuiteError, load_suite

    p = tmp_path / "s.yaml"
    p.write_text("name: s\ntargets:\n  - name: t\n    model: tiny\n    methods: [{method: baseline}]\n"
                 "datasets:\n  - name: d\n    kind: gsm9k\n")
    with pytest.raises(SuiteError) as info:
        load_suite(p)
    assert info.value.messages == [f"{p}:8: datasets[0].kind: unknown dataset kind 'gsm9k'; did you mean 'gsm8k'? "
                                   f"(valid: {', '.join(KINDS)})"]
