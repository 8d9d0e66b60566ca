"""Exits with status 0 before the tests run: must not count as a pass."""

import os

os._exit(0)
