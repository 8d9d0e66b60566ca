"""A launched vLLM server's start-up: a free loopback port, its readiness probe over HTTP, and the reason a start
failed as read from its log (and whether the reason says the configuration cannot run here: a skip, not a failure)."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request

HOST = "127.0.0.1"

# Phrases in a start-up exception meaning "this configuration cannot run on
# this platform" (skipped, not failed). Deliberately narrower than "not
# supported": vLLM also says "Model architectures [...] are not supported"
# for a bad checkpoint, which is a failure. The runner additionally marks
# skips from the method registry.
UNSUPPORTED_MARKERS = (
    "model runner v1 does not support",  # e.g. DSpark on CPU (V2 GPU runner only)
    "model runner v2 does not yet support",
    "not supported on cpu",
    "not supported on this platform",
    "only supported on",
    "requires cuda",
    "requires triton",
    "triton is not available",
    "is not available on",
    "unsupported platform",
)

_EXC_LINE = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit)\b:?.*$")

def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_failure(log_text: str) -> tuple[str, bool]:
    """``(reason, unsupported)`` from a server log that ended in a start-up failure.

    The reason is the exception naming an unsupported configuration if any,
    else the last exception, each with its indented continuation lines (where
    pydantic puts the actual message), cut to 400 characters. Only exceptions
    are searched, so warnings such as "X is not supported, falling back" do
    not count.
    """
    lines = log_text.splitlines()
    blocks: list[str] = []
    for i, ln in enumerate(lines):
        if not _EXC_LINE.match(ln):
            continue
        parts = [ln.strip()]
        for nxt in lines[i + 1 : i + 4]:
            if not nxt.startswith((" ", "\t")) or nxt.lstrip().startswith(
                ("File ", "For further information")
            ):
                break
            parts.append(nxt.strip())
        block = " ".join(parts)
        blocks.append(block if len(block) <= 400 else block[:397] + "...")
    for block in blocks:
        if any(m in block.lower() for m in UNSUPPORTED_MARKERS):
            return block, True
    if blocks:
        return blocks[-1], False
    rest = [ln.strip() for ln in lines if ln.strip()]
    return (rest[-1] if rest else "no output"), False


def http_get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:  # noqa: S310 - loopback/user URL
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""
