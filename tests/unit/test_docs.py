"""The README is the front door and the manual is the mkdocs site under docs/: the site builds with
``mkdocs build --strict`` (mkdocs.yml makes a broken internal link or anchor and a page missing from
the nav warnings, --strict makes them errors), a planted broken link fails that build, and what
users look up (every setting, every shipped suite) is on its page."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort
from support.paths import REPO

DOCS = REPO / "docs"
README = REPO / "README.md"
# A markdown link [text](target): the target up to its closing parenthesis.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _mkdocs_build_strict(root: Path, site: Path) -> None:
    """What ``mkdocs build --strict -f root/mkdocs.yml -d site`` does, in this process (each build in a
    subprocess would import mkdocs and the theme again: seconds). Raises mkdocs' Abort on a warning."""
    cfg = load_config(config_file=str(root / "mkdocs.yml"), site_dir=str(site), strict=True)
    cfg.plugins.on_startup(command="build", dirty=False)
    try:
        build(cfg)
    finally:
        cfg.plugins.on_shutdown()


def _site_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    shutil.copytree(DOCS, root / "docs")
    return root


def test_the_docs_build_strict(tmp_path: Path):
    _mkdocs_build_strict(REPO, tmp_path / "site")
    pages = sorted(p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.glob("*.md"))
    built = {p for p in pages if (tmp_path / "site" / ("" if p == "index" else p) / "index.html").is_file()}
    assert len(pages) >= 10 and built == set(pages)


def test_a_broken_internal_link_or_anchor_fails_the_docs_build(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    root = _site_copy(tmp_path)
    page = root / "docs" / "suites.md"
    page.write_text(page.read_text() + "\nSee [gone](no-such-page.md) and [the speed](speed.md#no-such-heading).\n")
    caplog.set_level(logging.WARNING, logger="mkdocs")
    with pytest.raises(Abort, match="strict mode"):
        _mkdocs_build_strict(root, tmp_path / "site")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "'no-such-page.md'" in warnings[0] + warnings[1] and "'#no-such-heading'" in warnings[0] + warnings[1]


def _headings(md: Path) -> set[str]:
    lines = md.read_text().splitlines()
    fenced = False
    out = set()
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slugify(line.lstrip("#").strip(), "-"))
    return out


def test_the_readme_is_a_front_door_whose_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    # The two commands, exactly; .ci/run runs the second.
    assert "bash scripts/install.sh && .venv/bin/specbench run suites/cpu-smoke.yaml\n" in text
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == "bash scripts/install.sh --test && .venv/bin/python -m pytest -q -ra" and f"{ci}\n" in text
    local = [t for t in LINK.findall(text) if "://" not in t]
    assert len(local) >= 10
    for target in local:
        path, _, anchor = target.partition("#")
        assert (REPO / path).is_file(), target
        assert not anchor or anchor in _headings(REPO / path), target


def test_every_setting_is_documented_in_the_docs():
    from specbench.settings import Settings

    page = (DOCS / "environment.md").read_text()
    rows = set(re.findall(r"^\| `(SPECBENCH_[A-Z_]+)` \|", page, flags=re.MULTILINE))
    assert rows == {f"SPECBENCH_{name.upper()}" for name in Settings.model_fields}


def test_every_shipped_suite_is_documented_in_the_docs():
    page = (DOCS / "suites.md").read_text()
    suites = sorted(p.name for p in (REPO / "suites").glob("*.yaml"))
    assert suites and [s for s in suites if f"`suites/{s}`" not in page] == []
