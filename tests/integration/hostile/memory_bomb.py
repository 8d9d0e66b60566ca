"""Allocates (and touches) memory until something gives: RLIMIT_AS -> MemoryError."""

hoard = []
while True:
    hoard.append(bytearray(64 * 1024 * 1024))
