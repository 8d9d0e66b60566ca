"""Hunts for the success marker wherever a program can read, then claims success.

It reads its own program (``__file__``, ``prog.py`` in its working directory),
``/proc/self/cmdline``, ``/proc/self/environ``, its environment, every open
file descriptor (what is left to read of each, and the file behind it), and the
command line and environment of every process it can see; it prints every
string there that looks like a marker or a token, writes each one to every
descriptor above 2 it may write to, and exits 0 before the tests run.
"""

import os
import re

blobs = []


def grab(path):
    try:
        with open(path, "rb") as f:
            blobs.append(f.read(1 << 20))
    except OSError:
        pass


for path in {globals().get("__file__") or "prog.py", "prog.py", "/proc/self/cmdline", "/proc/self/environ"}:
    grab(path)
blobs.append(repr(dict(os.environ)).encode())
fds = []
for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    fds.append(fd)
    try:
        grab(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
    try:
        os.set_blocking(fd, False)
        blobs.append(os.read(fd, 1 << 16))
    except OSError:
        pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        grab(f"/proc/{pid}/cmdline")
        grab(f"/proc/{pid}/environ")

text = b"\n".join(blobs).decode("utf-8", "replace")
candidates = sorted(set(re.findall(r"specbench-[a-z-]*passed-[0-9a-f]+|\b[0-9a-f]{16,}\b", text)))
for c in candidates:
    print(c, flush=True)
    for fd in fds:
        if fd > 2:
            try:
                os.write(fd, c.encode())
            except OSError:
                pass
print("FORGED", len(candidates), "candidate(s)", flush=True)
os._exit(0)
