"""Suite YAML → typed, strict :class:`Suite`, with file:line error messages: the loader.

Validation happens in two layers: pydantic (types, unknown keys, value
ranges; the models of :mod:`specbench.config.suite_models`, re-exported here) and the
cross-field checks of :mod:`specbench.config.suite_checks` (names that must exist, K within a
method's limits, files that must exist). :func:`load_suite` runs both and
reports errors as ``SuiteError`` carrying ``file:line: message`` lines.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from specbench.config.methods import closest
from specbench.config.suite_checks import check_semantics, resolve_schedule_files
from specbench.config.suite_checks import resolve_path as resolve_path  # where datasets and api look for it
from specbench.config.suite_models import (
    ENGINES,
    DatasetSpec,
    EquivalenceSpec,
    ExecutorSpec,
    HeadlineSpeedSpec,
    LoadSpec,
    MethodSpec,
    ReferenceValue,
    SampledEquivalenceSpec,
    SamplingSpec,
    ScheduleFrom,
    ScoringSpec,
    SLOSpec,
    Strict,
    Suite,
    SuiteError,
    SuiteWarning,
    TargetSpec,
    TauDefinitionName,
)

__all__ = [
    "ENGINES", "DatasetSpec", "EquivalenceSpec", "ExecutorSpec", "HeadlineSpeedSpec", "LoadSpec", "MethodSpec",
    "ReferenceValue", "SampledEquivalenceSpec", "SamplingSpec", "ScheduleFrom", "ScoringSpec", "SLOSpec", "Strict",
    "Suite", "SuiteError",
    "SuiteWarning", "TargetSpec", "TauDefinitionName", "load_suite", "load_yaml_model", "reference_method", "resolve_path",
]

# --------------------------------------------------------------------------
# line numbers


def _node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> tuple[yaml.Node | None, bool]:
    """Walk a composed YAML node tree along a pydantic ``loc``.

    Returns the deepest node reached and whether the path was walked fully.
    For a mapping key, the key node itself is returned (so that an unknown
    key points at its own line).
    """
    node = root
    for i, part in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == part:
                    nxt = k if i == len(loc) - 1 else v
                    break
            if nxt is None:
                return node, False
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node, False
            node = node.value[part]
        else:
            return node, False
    return node, True


def _line(root: yaml.Node | None, loc: tuple[Any, ...]) -> int:
    node, _ = _node_at(root, loc)
    return node.start_mark.line + 1 if node is not None else 1


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _pydantic_messages(path: str, root: yaml.Node | None, err: ValidationError,
                       top: type[BaseModel] | None = None) -> list[str]:
    msgs = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        text = e["msg"]
        if e["type"] == "extra_forbidden":
            parent_model = _model_for(loc[:-1], top or Suite)
            key = str(loc[-1])
            hint = closest(key, list(parent_model.model_fields)) if parent_model else None
            text = f"unknown key {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
        elif e["type"] == "missing":
            text = f"missing required key {str(loc[-1])!r}"
            loc = loc[:-1]
        msgs.append(f"{path}:{_line(root, loc)}: {_fmt_loc(loc) or '(top)'}: {text}")
    return msgs


def _model_for(loc: tuple[Any, ...], model: type[BaseModel] = Suite) -> type[BaseModel] | None:
    """The pydantic model class found at ``loc`` inside ``model`` (a Suite)."""
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        ann = field.annotation
        inner = getattr(ann, "__args__", (ann,))
        nested = [a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


# --------------------------------------------------------------------------
# loading

M = TypeVar("M", bound=BaseModel)


def load_yaml_model(path: str | Path, model: type[M], what: str, keys: str) -> tuple[M, yaml.Node | None]:
    """A YAML file validated as ``model``, with the composed node tree (for lines); raises
    :class:`SuiteError` with ``file:line`` messages, the path shown as typed."""
    p = Path(path)
    shown = str(path)
    if not p.is_file():
        raise SuiteError([f"{shown}:1: no such {what} file"])
    text = p.read_text()
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise SuiteError([f"{shown}:{line}: invalid YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise SuiteError([f"{shown}:1: a {what} must be a mapping with keys {keys}, …"])
    try:
        return model.model_validate(data), root
    except ValidationError as err:
        raise SuiteError(_pydantic_messages(shown, root, err, model)) from None


def load_suite(path: str | Path) -> Suite:
    """Load and fully validate a suite file; raises :class:`SuiteError`."""
    p = Path(path)
    shown = str(path)
    suite, root = load_yaml_model(path, Suite, "suite", "targets, datasets")
    suite.source_path = str(p.resolve())
    problems = resolve_schedule_files(suite, base_dir=p.resolve().parent)
    problems += check_semantics(suite, base_dir=p.resolve().parent)
    if problems:
        raise SuiteError([f"{shown}:{_line(root, loc)}: {_fmt_loc(loc)}: {msg}" for loc, msg in problems])
    for ri, r in enumerate(suite.references):
        if r.metric == "tau" and r.definition is None:
            loc = ("references", ri)
            warnings.warn(f"{shown}:{_line(root, loc)}: {_fmt_loc(loc)}: no definition: compared as vllm_tau "
                          "(vLLM's τ); name how the source counts (definition: vllm_tau | vllm_tau_per_request | "
                          "tokens_per_step | tokens_per_step_per_request | unknown)", SuiteWarning, stacklevel=2)
    return suite


def reference_method(suite: Suite, target: TargetSpec) -> str | None:
    """The label every method of ``target`` is compared with: the target's compare_to, else the
    suite's when the target has that method, else the target's first eagle3 method."""
    labels = [m.label for m in target.methods]
    if target.compare_to is not None:
        return target.compare_to if target.compare_to in labels else None
    if suite.compare_to is not None and suite.compare_to in labels:
        return suite.compare_to
    return next((m.label for m in target.methods if m.method == "eagle3"), None)


