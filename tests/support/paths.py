"""Where things live in the repository, for tests at any depth under tests/ (no ``parents[...]`` arithmetic)."""

from __future__ import annotations

from pathlib import Path

#: The tests/ directory.
TESTS = Path(__file__).resolve().parents[1]
#: The repository root (pyproject.toml, suites/, docs/, specbench/).
REPO = TESTS.parent
#: The package's source directory.
PACKAGE = REPO / "specbench"
#: The shipped suites.
SUITES = REPO / "suites"
#: Hand-built and recorded inputs of the tests (summaries, manifests, the recorded run).
FIXTURES = TESTS / "fixtures"
#: The real run recorded on the tiny zoo (raw records, manifest): ``analyze`` rebuilds its summary.
RECORDED = FIXTURES / "recorded"
#: Golden reports, compared byte for byte.
GOLDEN = TESTS / "golden"
