"""Fills the disk from its working directory (bounded at 512 MiB by the file
itself): the tmpfs size (or RLIMIT_FSIZE per file) stops it."""

chunk = b"\0" * (1 << 20)
for i in range(16):
    with open(f"fill_{i}", "wb") as f:
        for _ in range(32):
            f.write(chunk)
