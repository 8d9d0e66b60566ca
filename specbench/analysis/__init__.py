"""Records → numbers (pure: no engine, no I/O beyond reading a run's files through
``results.rundir``): ``pipeline`` (:func:`summarize_run`: a run's records in, its
complete summary out), ``metrics`` (per-group speed, speedup, latency, accuracy: every group's summary),
``group_acceptance`` (τ and acceptance), ``cross_checks`` (counter checks, the reference cross-check),
``method_comparison`` (headline ratios, K sweeps), ``step_time``,
``serving_metrics``, ``lossless`` (the verdicts) with ``lossless_greedy`` (greedy identity) and
``lossless_sampled`` (the sampled PIT test), with
``pit`` and ``equivalence`` (their verdicts on a run's records), ``sequential`` and ``early_stopping`` (confidence sequences and stop
rules), ``apply_noise`` (an A/A calibration's noise in a summary's speed intervals),
``timing`` (where a run's wall went: the breakdown of recorded spans; recording them is
:mod:`specbench.execution.timeline`) and ``timing_estimate`` (spans estimated from a run's files).
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "summarize": "metrics",
    "summarize_run": "pipeline",
    "breakdown": "timing",
})
__all__ = sorted(__dir__())
