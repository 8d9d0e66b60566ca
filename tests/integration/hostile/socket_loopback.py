"""Connects to a listener the test opened on the host's 127.0.0.1.

The test replaces SPECBENCH_LOOPBACK_PORT; it must see no connection."""

import socket

PORT = int("SPECBENCH_LOOPBACK_PORT")

try:
    with socket.create_connection(("127.0.0.1", PORT), timeout=2) as s:
        s.sendall(b"pwned")
        print("CONNECTED")
except OSError as exc:
    print("connect failed:", exc)
