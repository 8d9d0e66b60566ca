"""Imported by the fork server of vLLM workers (``vllm_offline.fork_server``) before it forks any.

vLLM's entry point, once per run's process: ~8 s of CPU that every engine start
would otherwise pay. Only the entry point: the modules the engine patches replace
load when an engine is built, in the forked worker, after its patches are installed.
Nothing here may start a thread or touch an accelerator (the workers are forked).
"""

import atexit
import gc
import os

try:
    from vllm import LLM, SamplingParams  # noqa: F401
except Exception:  # noqa: BLE001 - a worker imports it again and reports the error
    pass

gc.freeze()  # the imports live as long as the process: out of the collector's full passes

_SERVER = os.getpid()


@atexit.register
def _end_without_teardown() -> None:
    """The server ends with the run's process: no interpreter teardown, whose extension modules
    (Triton's) would print leak reports on the run's terminal after its last line."""
    if os.getpid() == _SERVER:
        os._exit(0)
