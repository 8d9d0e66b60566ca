"""The run report as Markdown (a CI job summary or a PR comment): the document
:func:`specbench.report.build.build_report` builds, written as GitHub-flavoured Markdown.
"""

from __future__ import annotations

import re

from specbench.report.build import build_report
from specbench.report.document import Block, Details, Para, Pre, Raw, Section, Table
from specbench.results.manifest import RunManifest
from specbench.results.summary import RunSummary

# --------------------------------------------------------------------------
# Markdown writer


def _md_cell(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text).replace("|", "\\|")


def _md_table(t: Table) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in t.headers) + " |",
             "|" + "|".join("---" for _ in t.headers) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    if t.notes:
        lines.append("")
        lines += [f"- {n}" for n in t.notes]
    return lines


def md_blocks(blocks: list[Block]) -> list[str]:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Section):
            out += ["#" * b.level + " " + b.title, ""] + md_blocks(b.blocks)
            continue
        if isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Pre):
            fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", b.text)), default=0) + 1)
            out += [fence + "text", b.text, fence]
        elif isinstance(b, Table):
            out += _md_table(b)
        elif isinstance(b, Details):
            out += ["<details>", f"<summary>{_html_escape(b.summary)}</summary>", ""] + md_blocks(b.blocks)
            out.append("</details>")
        elif isinstance(b, Raw):
            out.append(b.markdown.rstrip())
        out.append("")
    return out


def _html_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(summary: RunSummary, manifest: RunManifest | None = None, ab: Section | None = None,
                    schedule: Section | None = None) -> str:
    """The run report as GitHub-flavoured Markdown (deterministic)."""
    lines = [f"# specbench · {summary.suite_name}", ""] + md_blocks(build_report(summary, manifest, ab=ab, schedule=schedule))
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
