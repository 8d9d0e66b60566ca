"""``sys.exit(0)`` before the tests run: must not count as a pass."""

import sys

sys.exit(0)
