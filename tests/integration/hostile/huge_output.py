"""Floods stdout and stderr: RLIMIT_FSIZE caps the capture files (EFBIG)."""

import sys

line = "x" * 65535 + "\n"
while True:
    sys.stdout.write(line)
    sys.stderr.write(line)
