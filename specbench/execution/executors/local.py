"""The local executor: one job at a time, in the driver's process (engines in children)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from specbench.engines.child import close_hosts
from specbench.engines.vllm_offline import close_spare
from specbench.execution.jobs import EngineJob
from specbench.execution.worker import FollowUp, local_placement, run_job


class LocalExecutor:
    name = "local"

    def __init__(self, follow_up: FollowUp | None = None):
        self.follow_up = follow_up  # set by the driver: teacher forcing on an engine already up

    def check(self, jobs: Sequence[EngineJob]) -> list[str]:
        return []

    def run(self, jobs: Sequence[EngineJob], emit: Callable[[Any], None]) -> None:
        placement = local_placement(self.name)
        for job in jobs:
            run_job(job, emit, placement, self.follow_up)

    def shutdown(self) -> None:
        close_spare()
        close_hosts()
