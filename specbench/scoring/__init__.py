"""Task-accuracy scoring: GSM8k answer matching, HumanEval functional correctness
(executed only in :mod:`specbench.scoring.sandbox`, and only when allowed), and
accuracy aggregation with confidence intervals.

(The ``accuracy()`` function is not re-exported here: it would shadow the
``specbench.scoring.accuracy`` module; import it from there.)
"""

from specbench.scoring.accuracy import (
    AccuracyEstimate,
    PairedDelta,
    group_scores,
    paired_delta,
    pass_at_k,
    pass_at_k_estimate,
)
from specbench.scoring.gsm8k import extract_answer, extract_strict, reference_answer, score_gsm8k
from specbench.scoring.humaneval import (
    CodeExecutionNotAllowed,
    HumanEvalResult,
    build_program,
    load_problems,
    require_code_exec,
    score_humaneval,
    truncate_completion,
)
from specbench.scoring.sandbox import ExecResult, describe_isolation, run_program, run_programs

__all__ = [
    "CodeExecutionNotAllowed",
    "AccuracyEstimate",
    "ExecResult",
    "HumanEvalResult",
    "PairedDelta",
    "build_program",
    "describe_isolation",
    "extract_answer",
    "extract_strict",
    "group_scores",
    "load_problems",
    "paired_delta",
    "pass_at_k",
    "pass_at_k_estimate",
    "reference_answer",
    "require_code_exec",
    "run_program",
    "run_programs",
    "score_gsm8k",
    "score_humaneval",
    "truncate_completion",
]
