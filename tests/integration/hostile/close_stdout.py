"""Closes stdout and stderr at import time."""

import os

os.close(1)
os.close(2)
