"""The CPU zoo: a tiny target and its drafters, trained locally (no hub)."""
