"""Engines that take turns on one accelerator with vLLM's sleep mode (A/B pairs, the headline's blocks).

A pair of engines that does not fit on one GPU together (each holds its ``gpu_memory_utilization`` share)
runs with ``enable_sleep_mode`` (:func:`specbench.config.arms.with_sleep_mode`): one sleeps while the other
runs. :class:`Turns` keeps at most one of them awake; it works on the resident engines of
:mod:`specbench.execution.rounds` (their ``engine``, ``dead``, ``runner`` and ``run_round``).
"""

from __future__ import annotations

from specbench.config.plan import prompts_per_batch
from specbench.engines.protocol import CellFailed, Engine, sleeper
from specbench.execution.jobs import CellWork
from specbench.execution.resident_engine import ResidentEngine


class Turns:
    """Engines that take turns on one accelerator with vLLM's sleep mode (an A/B pair that does not fit on
    one GPU together; config.arms.with_sleep_mode): at most one of them awake. Each sleeps once started
    (the next one's start needs the memory); before an engine's cells run, the awake one sleeps and it
    wakes, and its first batch after the wake-up runs untimed (records dropped: a woken engine's first
    batch re-allocates what it dropped). An engine whose sleep or wake-up fails is ended: its later
    cells fail with the reason."""

    def __init__(self) -> None:
        self.members: set[str] = set()
        self.awake: str | None = None

    def join(self, key: str, engine: Engine) -> None:
        """A just-started engine: put to sleep if it takes turns (raises :class:`CellFailed`)."""
        if engine.capabilities.sleeps:
            sleeper(engine).sleep()
            self.members.add(key)

    def switch(self, key: str, up: dict[str, ResidentEngine], warm: tuple[CellWork, tuple[int, int], int] | None = None,
               ) -> bool:
        """Make ``key``'s engine the awake one (and run ``warm``'s first batch untimed: the cell, its round
        span and the round). False when nothing had to change."""
        res = up[key]
        if key not in self.members or self.awake == key or res.dead is not None:
            return False
        if self.awake is not None:
            self._toggle(up[self.awake], wake=False)
            self.awake = None
        if not self._toggle(res, wake=True):
            return True
        self.awake = key
        if warm is not None:
            work, span, r = warm
            unit = prompts_per_batch(work.request.cell.batch_size, work.request.sampling.samples_per_prompt)
            first = work.request.model_copy(update={"prompts": work.request.prompts[span[0]:min(span[1], span[0] + unit)]})
            try:
                res.engine.run_cell(first, lambda rec: None)
            except CellFailed as exc:
                res._fail(work, f"round {r}: the untimed batch after a wake-up: {exc.reason}", exc.log_tail)
                if exc.engine_dead:
                    res.dead = f"the engine died in round {r} ({exc.reason})"
        return True

    @staticmethod
    def _toggle(res: ResidentEngine, *, wake: bool) -> bool:
        try:
            engine = sleeper(res.engine)
            engine.wake_up() if wake else engine.sleep()
            return True
        except CellFailed as exc:
            res.dead = f"vLLM's sleep mode: {exc.reason}; the engine was ended"
            res.engine.kill()
            return False
