"""The run report as ONE self-contained HTML file, and :func:`write_reports`.

The HTML shows every table of the Markdown report (both come from
:func:`specbench.report.build.build_report`), the figures as base64
``data:`` URIs, the suite configuration and the environment. CSS is inline;
there is no JavaScript and no external resource, so the file opens offline
and can be attached to a CI run as is.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import jinja2
import yaml
from markupsafe import Markup, escape

from specbench.report.build import build_report
from specbench.report.document import Block, Details, Para, Pre, Raw, Section, Table
from specbench.report.figure import TITLES
from specbench.report.markdown import render_markdown
from specbench.report.plots import make_figures
from specbench.results import rundir
from specbench.results.ab_file import is_ab_run, read_ab
from specbench.results.manifest import RunManifest
from specbench.results.schedule_file import has_schedule, read_run_schedule
from specbench.results.summary import RunSummary

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("specbench.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)

_BAD = re.compile(r"^(FAILED|FLAG\b|divergent\b|failed\b)")
_WARN = re.compile(r"^(not shown equivalent|skipped\b|partial\b|pending\b)")
_GOOD = re.compile(r"^(ok|equivalent|agrees)\b")


def _cell_class(text: str) -> str:
    if _BAD.match(text):
        return "bad"
    if _WARN.match(text):
        return "warn"
    if _GOOD.match(text):
        return "good"
    return "wrap" if len(text) > 60 else ""


_CODE = re.compile(r"(`+)(.+?)\1")
_STRONG = re.compile(r"\*\*(.+?)\*\*")


def _inline(text: str) -> Markup:
    """A paragraph's inline Markdown (``**strong**``, `` `code` ``) as escaped HTML; the rest is text."""
    out, pos = [], 0
    for m in _CODE.finditer(text):
        out.append(_STRONG.sub(r"<strong>\1</strong>", str(escape(text[pos:m.start()]))))
        out.append(f"<code>{escape(m.group(2).strip())}</code>")
        pos = m.end()
    out.append(_STRONG.sub(r"<strong>\1</strong>", str(escape(text[pos:]))))
    return Markup("".join(out))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _ctx(block: Block) -> dict[str, Any] | None:
    """A block as plain data for the template (Raw Markdown has no HTML form)."""
    if isinstance(block, Section):
        children = [c for c in (_ctx(b) for b in block.blocks) if c is not None]
        return {"kind": "section", "title": block.title, "level": block.level,
                "id": block.anchor or _slug(block.title), "blocks": children}
    if isinstance(block, Para):
        return {"kind": "para", "text": _inline(block.text)}
    if isinstance(block, Pre):
        return {"kind": "pre", "text": block.text}
    if isinstance(block, Table):
        rows = [[{"text": c, "cls": _cell_class(c)} for c in row] for row in block.rows]
        return {"kind": "table", "headers": block.headers, "rows": rows, "notes": [_inline(n) for n in block.notes]}
    if isinstance(block, Details):
        return {"kind": "details", "summary": block.summary,
                "blocks": [c for c in (_ctx(b) for b in block.blocks) if c is not None]}
    if isinstance(block, Raw):
        return None
    raise TypeError(f"unknown block {block!r}")


def _suite_yaml(manifest: RunManifest | None) -> str | None:
    suite = manifest.stored().get("suite") if manifest is not None else None
    if not suite:
        return None
    try:
        return yaml.safe_dump(suite, sort_keys=False, allow_unicode=True, width=100)
    except yaml.YAMLError:
        return json.dumps(suite, indent=2, default=str)


def render_html(summary: RunSummary, manifest: RunManifest | None = None, figures: dict[str, bytes] | None = None,
                ab: Section | None = None, schedule: Section | None = None) -> str:
    """The report as one HTML page. ``figures`` defaults to :func:`make_figures` of the summary."""
    if figures is None:
        figures = make_figures(summary)
    blocks = [c for c in (_ctx(b) for b in build_report(summary, manifest, markdown=False, ab=ab, schedule=schedule)) if c is not None]
    head = [b for b in blocks if b["kind"] != "section"]
    sections = [b for b in blocks if b["kind"] == "section"]
    figs = [{"id": f"fig-{name}", "title": TITLES.get(name, name), "name": name,
             "src": "data:image/png;base64," + base64.b64encode(png).decode("ascii")}
            for name, png in figures.items()]
    nav = [(s["id"], s["title"]) for s in sections[:1]] + ([("figures", "Figures")] if figs else [])
    nav += [(s["id"], s["title"]) for s in sections[1:]] + [("configuration", "Configuration")]
    return _ENV.get_template("report.html.j2").render(
        title=f"specbench · {summary.suite_name} · {summary.run_id}",
        suite_name=summary.suite_name,
        run_id=summary.run_id,
        head=head,
        first_sections=sections[:1],
        sections=sections[1:],
        figures=figs,
        nav=nav,
        suite_yaml=_suite_yaml(manifest),
        manifest_json=json.dumps({k: v for k, v in (manifest.stored() if manifest is not None else {}).items()
                                  if k not in ("suite", "plan")}, indent=2, sort_keys=True, default=str),
    )


def write_reports(run_dir: Path, out_dir: Path | None = None, *, summary: RunSummary | None = None,
                  manifest: RunManifest | None = None) -> dict[str, Path]:
    """Write ``<out_dir>/<run-id>.md`` and ``.html`` for a run directory, and ``<run-id>.summary.md``: the
    compact summary that fits a PR comment (:mod:`specbench.report.compact`), pointing at the full report.

    ``run_dir`` holds ``summary.json`` and (optionally) ``manifest.json`` (read unless given as
    ``summary`` / ``manifest``);
    ``out_dir`` defaults to :func:`specbench.results.rundir.reports_dir_for`.
    Returns ``{"markdown": path, "html": path, "summary": path}`` (and ``serving_csv`` when the run served).
    """
    run_dir = Path(run_dir)
    if summary is None:
        if not rundir.has_summary(run_dir):
            raise FileNotFoundError(f"{run_dir}: no {rundir.SUMMARY} "
                                    f"(run `specbench analyze {run_dir}` first?)")
        summary = rundir.read_summary(run_dir)
    if manifest is None and rundir.has_manifest(run_dir):
        manifest = rundir.read_manifest(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else rundir.reports_dir_for(run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", summary.run_id) or "run"
    md = out_dir / f"{stem}.md"
    html = out_dir / f"{stem}.html"
    section, figures = None, None
    if is_ab_run(run_dir):  # an A/B run (specbench ab): its verdicts first, and their figure
        from specbench.analysis.ab_rounds import ABResult
        from specbench.report.ab_summary import ab_figure, ab_section

        result = read_ab(run_dir, ABResult)
        section, png = ab_section(result), ab_figure(result)
        figures = {**({"ab": png} if png is not None else {}), **make_figures(summary)}
    sched = None
    if has_schedule(run_dir):  # the run's schedule file (`specbench schedule`, or a scheduled method's run)
        from specbench.report.schedule_section import schedule_section

        sched = schedule_section(read_run_schedule(run_dir))
    md.write_text(render_markdown(summary, manifest, ab=section, schedule=sched), encoding="utf-8")
    html.write_text(render_html(summary, manifest, figures, ab=section, schedule=sched), encoding="utf-8")
    out = {"markdown": md, "html": html}
    from specbench.report.compact import SUFFIX, render_compact

    out["summary"] = out_dir / f"{stem}{SUFFIX}"
    out["summary"].write_text(render_compact(summary, manifest, full_report=f"{md.name} / {html.name}"), encoding="utf-8")
    from specbench.report.method_sections import serving_csv

    raw = serving_csv(summary)
    if raw is not None:  # the serving table's every column, in seconds, beside the report
        out["serving_csv"] = out_dir / f"{stem}-serving.csv"
        out["serving_csv"].write_text(raw, encoding="utf-8")
    return out
