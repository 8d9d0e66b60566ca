"""Tries to become root again and write where only root may."""

import os

TAG = "SPECBENCH_TAG"

for action in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.setgroups([0])):
    try:
        action()
    except OSError:
        pass
try:
    with open(f"/etc/specbench_pwned_{TAG}", "w") as f:
        f.write("pwned")
except OSError:
    pass
os.system(f"su -c 'touch /etc/specbench_pwned_su_{TAG}' root </dev/null >/dev/null 2>&1")
