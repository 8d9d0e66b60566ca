"""Tries to reach the internet (TCP 8.8.8.8:53). Only run where the sandbox has
its own network namespace, so that no packet can leave this host."""

import socket

try:
    with socket.create_connection(("8.8.8.8", 53), timeout=2):
        print("CONNECTED")
except OSError as exc:
    print("connect failed:", exc)
