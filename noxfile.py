"""nox sessions. vLLM's CPU build is heavy, so sessions reuse ./.venv made by
scripts/install.sh instead of building their own environments."""

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
VENV_BIN = ".venv/bin/"


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """Install (idempotent) and run every test, integration tests on real vLLM included."""
    session.run("bash", "scripts/install.sh", "--test", external=True)
    session.run(VENV_BIN + "python", "-m", "pytest", "-q", "-ra", *session.posargs, external=True)


@nox.session(venv_backend="none")
def unit(session: nox.Session) -> None:
    """The fast lane: everything outside tests/integration (pure code, hand-built records), < 1 min."""
    session.run("bash", "scripts/install.sh", "--test", external=True)
    session.run(VENV_BIN + "python", "-m", "pytest", "-q", "-m", "not integration", *session.posargs, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    session.run(VENV_BIN + "ruff", "check", "specbench", "tests", "benchmarks", external=True)


@nox.session(venv_backend="none")
def typecheck(session: nox.Session) -> None:
    session.run(VENV_BIN + "mypy", "specbench", external=True)


@nox.session(venv_backend="none")
def demo(session: nox.Session) -> None:
    """The main job: the CPU smoke suite on real vLLM."""
    session.run("bash", "scripts/install.sh", external=True)
    session.run(VENV_BIN + "specbench", "run", "suites/cpu-smoke.yaml", *session.posargs, external=True)


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """The docs site (docs/ → site/), built strict as tests/unit/test_docs.py builds it."""
    session.run("bash", "scripts/install.sh", "--test", external=True)
    session.run(VENV_BIN + "mkdocs", "build", "--strict", *session.posargs, external=True)
