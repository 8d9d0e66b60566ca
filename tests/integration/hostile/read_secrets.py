"""Looks for secrets: its environment and every /proc/*/environ it can read."""

import os

print("ENV", dict(os.environ))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                print("PROC", pid, f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
