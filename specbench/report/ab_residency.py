"""How ``specbench ab``'s engine pairs share the machine, in words (``specbench ab --dry-run`` prints it): on a
CPU both arms' engines are up together; on a GPU an engine and its counterpart share it when both fit, else
they take turns with vLLM's sleep mode (:func:`specbench.config.arms.with_sleep_mode`)."""

from __future__ import annotations

from specbench.config.arms import SLEEP_LEVEL
from specbench.config.suite import Suite
from specbench.execution.rounds import ENGINE_OVERHEAD_GIB, RESIDENT_MEMORY_SHARE


def ab_residency(suite: Suite, turns: list[str], cpu: bool) -> str:
    """The residency line of an A/B plan: ``suite`` as planned (its targets' memory shares), ``turns``: the
    targets whose engine pairs take turns on a GPU (:func:`specbench.config.arms.pairs_taking_turns`)."""
    if cpu:
        return ("CPU: each engine and its counterpart in the other arm are up together, as many pairs at "
                f"once as {RESIDENT_MEMORY_SHARE:.0%} of the free memory holds (an engine: its KV cache space "
                f"plus about {ENGINE_OVERHEAD_GIB:g} GiB)")
    parts = []
    if turns:
        parts.append(f"target(s) {', '.join(repr(t) for t in turns)}: an engine and its counterpart do not fit "
                     "on one GPU together, so they take turns with vLLM's sleep mode (enable_sleep_mode; between "
                     f"turns the idle one sleeps at level {SLEEP_LEVEL}: weights offloaded to CPU memory, KV cache "
                     "dropped); a turn runs one arm's cells of a round, and its first batch after the wake-up "
                     "runs untimed")
    shared = [t for t in suite.targets if t.engine != "reference" and t.name not in turns]
    if shared:
        shares = sorted({t.gpu_memory_utilization for t in shared}, key=str)
        parts.append(f"target(s) {', '.join(repr(t.name) for t in shared)}: an engine and its counterpart share "
                     f"one GPU (gpu_memory_utilization {', '.join(f'{x:g}' for x in shares)} each), no sleep mode")
    return "GPU: " + "; ".join(parts)
