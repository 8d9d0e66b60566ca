"""Running a plan: ``driver`` (plan → engine jobs; the single writer of a run's
files), ``jobs`` (engine jobs and their typed events), ``worker`` (runs one job:
start, warmup, cells, teacher forcing), ``teacher_forcing``, ``timeline`` (where
the run's wall time goes, recorded as it goes), ``interrupt`` (SIGINT/SIGTERM) and
``executors`` (local, Ray).
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "StopRequested": "interrupt",
})
__all__ = sorted(__dir__())
