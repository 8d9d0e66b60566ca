"""Spins forever at import time: must end as a wall-clock timeout."""

while True:
    pass
