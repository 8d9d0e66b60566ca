"""Classic fork bomb: every process keeps forking. RLIMIT_NPROC on the dedicated
uid caps the count; the wall timeout and the PID namespace / uid sweep end them."""

import os

while True:
    try:
        os.fork()
    except OSError:
        pass
