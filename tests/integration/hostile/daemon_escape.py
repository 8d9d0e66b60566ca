"""Double-forks a daemon in a new session that outlives the program and writes
a file later. The sandbox must kill it; the file must never appear."""

import os
import time

TAG = "SPECBENCH_TAG"

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(1.0)
        for path in (f"/tmp/specbench_pwned_late_{TAG}", f"/var/tmp/specbench_pwned_late_{TAG}"):
            try:
                with open(path, "w") as f:
                    f.write("pwned")
            except OSError:
                pass
        time.sleep(600)
    os._exit(0)
