"""The engines a cell runs on, behind one contract (``protocol``: start, run a
cell, score, alive, kill, close, describe and declared capabilities): vLLM
offline (``vllm_offline``), a vLLM server with a load generator
(``vllm_server``, ``loadgen`` (the load schedule) with ``stream_client`` (one streamed
request, timed per token), ``prom``), and the reference simulator
(``reference``); ``vllm_args`` is the one translation of an engine config into
vLLM's arguments and server flags; ``factory`` resolves a plan's engine config
to an engine, ``child`` runs one in a child process, ``procs`` ends what it
started, ``vllm_patches`` fixes known engine bugs inside engine processes.
Nothing here imports vLLM at import time.
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "Engine": "protocol",
    "EngineCapabilities": "protocol",
    "EngineUnavailable": "protocol",
    "CellFailed": "protocol",
})
__all__ = sorted(__dir__())
