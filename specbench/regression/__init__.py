"""Runs against runs: ``run_diff`` (two runs, group by group), ``gate`` (rules →
pass/fail for CI), ``history`` (a database of runs), ``gate_history`` (a gate
against a window of history) and ``changepoints`` (steps in a metric's history).
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
})
