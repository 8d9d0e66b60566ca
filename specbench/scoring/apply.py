"""Score a run's records against their datasets' references.

GSM8k answers are compared in-process (pure string work). HumanEval
completions are *executed*, so they run only in the sandbox and only when
the user opted in (``--allow-code-exec`` or ``scoring: {allow_code_exec:
true}``); otherwise their scores are recorded as skipped with that reason.

Scores are derived data: they are cached in ``scores.jsonl`` in the run
directory and rebuilt when it is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.config.dataset_kinds import KINDS, Scorer
from specbench.config.plan import Cell
from specbench.config.suite import ScoringSpec
from specbench.results import rundir
from specbench.results.manifest import RunManifest
from specbench.results.records import RequestRecord
from specbench.scoring.gsm8k import reference_answer, score_gsm8k

ScoreKey = tuple[str, str, int]  # cell_id, prompt_id, sample_index
NOT_ALLOWED = "HumanEval not scored: code execution is off (pass --allow-code-exec to run it in the sandbox)"
EXECUTED = "HumanEval executed in the sandbox"
#: The score a scorer's accuracy is read from (of the scores it gives each request).
HEADLINE_SCORE = {Scorer.ANSWER: "strict", Scorer.EXECUTION: "pass@1"}


def score_key(r: RequestRecord) -> ScoreKey:
    return (r.cell_id, r.prompt_id, r.sample_index)


def score_requests(
    requests: Sequence[RequestRecord],
    dataset_of_cell: Mapping[str, str],
    kind_of_dataset: Mapping[str, str],
    references: Mapping[tuple[str, str], str | None],
    *,
    allow_code_exec: bool,
    workers: int = 4,
    timeout_s: float = 10.0,
    cached: Mapping[ScoreKey, dict[str, Any]] | None = None,
) -> tuple[dict[ScoreKey, dict[str, Any]], list[str]]:
    """Scores per request (``{"strict": bool, "flexible": bool}`` for GSM8k,
    ``{"pass@1": bool}`` for HumanEval) and notes for the report."""
    cached = cached or {}
    out: dict[ScoreKey, dict[str, Any]] = {}
    notes: list[str] = []
    to_execute: list[RequestRecord] = []
    for r in requests:
        if r.error is not None:
            continue
        key = score_key(r)
        if key in cached:
            out[key] = dict(cached[key])
            continue
        ds = dataset_of_cell.get(r.cell_id)
        kind = KINDS.get(kind_of_dataset.get(ds or "", ""))
        scorer = kind.scorer if kind is not None else None
        if scorer is Scorer.ANSWER:
            ref = references.get((ds or "", r.prompt_id))
            if ref:
                s = score_gsm8k(r.output_text, reference_answer(ref))
                out[key] = {"strict": s["strict"], "flexible": s["flexible"], "extracted": s["extracted"]}
        elif scorer is Scorer.EXECUTION:
            to_execute.append(r)
    if to_execute:
        if not allow_code_exec:
            notes.append(NOT_ALLOWED)
        else:
            from specbench.scoring.humaneval import score_humaneval

            results = score_humaneval(to_execute, allow_code_exec=True, workers=workers, timeout_s=timeout_s)
            for r, res in zip(to_execute, results, strict=True):
                out[score_key(r)] = {"pass@1": res.passed, "status": res.status, "isolation": res.isolation}
            isolations = sorted({str(res.isolation) for res in results})
            notes.append(f"{EXECUTED} (isolation: {', '.join(isolations)})")
    return out, notes


def execution_note(notes: Sequence[str]) -> str | None:
    """Of :func:`score_requests`' notes, the one about executed (or not executed) completions."""
    return next((n for n in notes if n == NOT_ALLOWED or n.startswith(EXECUTED)), None)


def score_run(
    run_dir: Path,
    manifest: RunManifest,
    cells: Sequence[Cell],
    requests: Sequence[RequestRecord],
    allow_code_exec: bool | None,
    torn: list[str] | None = None,
) -> tuple[dict[ScoreKey, dict[str, Any]], list[str]]:
    """Every scorable request of the run scored (:func:`score_requests`), the new scores appended to the
    ``scores.jsonl`` cache; ``allow_code_exec`` None: the stored suite's ``scoring.allow_code_exec``."""
    prompts = rundir.read_prompts(run_dir, torn)
    if not prompts:
        return {}, []
    suite = manifest.suite
    scoring = suite.scoring if suite is not None else ScoringSpec()
    allow = scoring.allow_code_exec if allow_code_exec is None else allow_code_exec
    cached = rundir.read_scores(run_dir, torn)
    scores, notes = score_requests(
        requests,
        {c.cell_id: c.dataset for c in cells},
        {d.name: d.kind for d in suite.datasets} if suite is not None else {},
        {(p.dataset, p.prompt_id): p.reference for p in prompts},
        allow_code_exec=allow,
        workers=scoring.workers,
        timeout_s=scoring.timeout_s,
        cached=cached,
    )
    rundir.append_scores(run_dir, {k: v for k, v in scores.items() if k not in cached})
    return scores, notes
