"""Writes outside its working directory and tries to delete a sentinel directory.

The test replaces SPECBENCH_TAG and SPECBENCH_SENTINEL_DIR before running it."""

import os
import shutil

TAG = "SPECBENCH_TAG"
SENTINEL = "SPECBENCH_SENTINEL_DIR"

targets = [
    f"/tmp/specbench_pwned_{TAG}",
    f"/var/tmp/specbench_pwned_{TAG}",
    f"/dev/shm/specbench_pwned_{TAG}",
    f"/run/lock/specbench_pwned_{TAG}",
    os.path.join(SENTINEL, f"specbench_pwned_{TAG}"),
    os.path.join(os.path.dirname(SENTINEL), f"specbench_pwned_{TAG}_sibling"),
]
for path in targets:
    try:
        with open(path, "w") as f:
            f.write("pwned")
    except OSError:
        pass
for name in os.listdir(SENTINEL) if os.path.isdir(SENTINEL) else []:
    try:
        os.unlink(os.path.join(SENTINEL, name))
    except OSError:
        pass
shutil.rmtree(SENTINEL, ignore_errors=True)
os.system(f"rm -rf {SENTINEL} 2>/dev/null")
