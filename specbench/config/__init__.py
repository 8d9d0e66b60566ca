"""The suite and what it decides: ``suite`` (the YAML, validated with file:line
errors), ``methods`` (the speculative methods specbench knows), ``stop_rule``
(early stopping's rule and record), ``plan`` (Suite → Plan of engines and cells:
every derived decision is made here; nothing after the planner reads the suite).
"""

from specbench._lazy import exports

__getattr__, __dir__ = exports(__name__, {
    "Suite": "suite",
    "SuiteError": "suite",
    "load_suite": "suite",
    "METHODS": "methods",
    "ENGINE_PATCHES": "methods",
    "StopRule": "stop_rule",
    "StopRecord": "stop_rule",
    "Plan": "plan",
    "Cell": "plan",
    "EngineConfig": "plan",
    "VllmPassthrough": "methods",
    "expand": "plan",
})
__all__ = sorted(__dir__())
