"""The local executor: one job at a time, in the driver's process (engines in children)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specbench.config.arms import base_target
from specbench.engines.child import close_hosts
from specbench.engines.kept import KeptEngines
from specbench.engines.vllm_offline import close_zygotes
from specbench.execution.jobs import EngineJob
from specbench.execution.rounds import RoundHook, run_interleaved
from specbench.execution.worker import FollowUp, local_placement, run_job


class LocalExecutor:
    name = "local"

    def __init__(self, follow_up: FollowUp | None = None, kept: KeptEngines | None = None,
                 round_hook: RoundHook | None = None):
        self.follow_up = follow_up  # set by the driver: teacher forcing on an engine already up
        self.kept = kept  # engines kept between runs in this process (api.run(keep=...))
        self.round_hook = round_hook  # an A/B run's decisions after each round (specbench.execution.ab_round_decisions)

    def check(self, jobs: Sequence[EngineJob]) -> list[str]:
        return []

    def run(self, jobs: Sequence[EngineJob], emit: Callable[[Any], None]) -> None:
        """Each job in turn; jobs with speed rounds (``rounds > 1``) run together per target, where
        the first of that target's would have run (:func:`specbench.execution.rounds.run_interleaved`)."""
        placement = local_placement(self.name)
        done: set[str] = set()
        for job in jobs:
            if job.job_id in done:
                continue
            if job.rounds > 1 and job.kind == "cells":
                target = base_target(job.engine.config.target.name)  # an A/B run: both arms together
                group = [j for j in jobs if j.rounds > 1 and j.kind == "cells"
                         and base_target(j.engine.config.target.name) == target]
                done |= {j.job_id for j in group}
                run_interleaved(group, emit, placement, self.follow_up, kept=self.kept, round_hook=self.round_hook)
            else:
                run_job(job, emit, placement, self.follow_up, kept=self.kept)

    def shutdown(self) -> None:
        if self.kept is None:  # a keeper's later runs fork their engines from the zygotes (it ends them)
            close_zygotes()
        close_hosts()
