"""Changes to / and writes there (and into /etc)."""

import os

TAG = "SPECBENCH_TAG"

os.chdir("/")
for path in (f"specbench_pwned_{TAG}", f"/etc/specbench_pwned_{TAG}"):
    try:
        with open(path, "w") as f:
            f.write("pwned")
    except OSError:
        pass
