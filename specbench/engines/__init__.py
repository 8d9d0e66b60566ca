"""The engines a cell runs on, behind one protocol (``protocol``): vLLM offline
(``vllm_offline``), a vLLM server with a load generator (``vllm_server``,
``loadgen``, ``prom``), and the reference simulator (``reference``);
``factory`` resolves a plan's engine config to one, ``child`` runs it in a
child process, ``procs`` ends what it started, ``vllm_patches`` fixes known
engine bugs inside engine processes. Nothing here imports vLLM at import time.
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "Engine": "protocol",
    "EngineUnavailable": "protocol",
    "CellFailed": "protocol",
})
__all__ = sorted(__dir__())
