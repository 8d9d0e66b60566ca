"""Runs against runs: ``run_diff`` (two runs, group by group), ``gate`` (rules → pass/fail for CI; its
rules in ``gate_rules``, its baseline in ``gate_baseline``), ``ab_gate`` (``specbench ab``'s exit code),
``calibrate_noise`` (an A/A speed-noise calibration), ``history`` (a database of runs), ``gate_history``
(a gate against a window of history) and ``changepoints`` (steps in a metric's history).
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
})
