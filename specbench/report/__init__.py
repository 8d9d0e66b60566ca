"""Reports of a run: Markdown (CI summary / PR comment), HTML (one file) and figures.

Importing this package is cheap; matplotlib and jinja2 load only when the
HTML report or the figures are asked for.
"""

from __future__ import annotations

from typing import Any

from specbench.results.fmt import (
    as_estimate,
    auto_digits,
    fmt_est,
    fmt_generic,
    fmt_pct,
    fmt_speedup,
    fmt_tps,
    n_note,
)

# The formatters are re-exported for callers outside the package; modules
# inside it import :mod:`specbench.results.fmt` directly (this package's lazy
# ``__getattr__`` imports the renderers, which must not import it back).
__all__ = [
    "render_markdown", "render_html", "write_reports", "make_figures",
    "as_estimate", "auto_digits", "fmt_est", "fmt_generic", "fmt_pct", "fmt_speedup", "fmt_tps", "n_note",
]


def __getattr__(name: str) -> Any:
    if name == "render_markdown":
        from specbench.report.markdown import render_markdown

        return render_markdown
    if name in ("render_html", "write_reports"):
        from specbench.report import html

        return getattr(html, name)
    if name == "make_figures":
        from specbench.report.plots import make_figures

        return make_figures
    raise AttributeError(name)
