"""``specbench trend``: every metric of every group over the stored runs, per suite.

One Markdown and one self-contained HTML page (figures embedded as PNG) per
suite and hardware class: each group's metrics over runs with their 95%
interval bands, detected steps as dashed lines, the first run of a worse
level marked red, and a table of each group's latest change. Rendering only: the series, their steps and
changes come from :mod:`specbench.regression.trend_series`.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from specbench.regression.history import History, Point, RunInfo
from specbench.regression.trend_series import Series, TrendPage, build_pages
from specbench.results import metric_catalog as catalog
from specbench.results.fmt import fmt_est

#: Metrics drawn, in this order, when a group has them (all metrics are in the tables).
FIGURE_METRICS = ("tau", "speedup", "output_tps", "accuracy.", "ttft_s", "serving.ttft_p50_s",
                  "serving.tpot_p50_s", "serving.itl_p50_s", "latency_p50_s")
MAX_PANELS = 6
higher_is_better = catalog.higher_is_better


def _fmt(metric: str, p: Point) -> str:
    return p.verdict if p.verdict is not None else fmt_est(p.estimate, catalog.digits(metric, p.estimate.value))


def _latest_change(s: Series) -> tuple[str, str, str, str]:
    """(previous, latest, Δ %, step) of a series."""
    pts = s.points
    latest = _fmt(s.metric, pts[-1])
    if len(pts) < 2:
        return "–", latest, "–", "–"
    if s.is_verdict:
        return _fmt(s.metric, pts[-2]), latest, "–", "changed" if pts[-2].verdict != pts[-1].verdict else "–"
    pct = s.latest_change_pct()
    rel = "–" if pct is None else f"{pct:+.1f}%"
    step = "–"
    if s.steps:
        st = s.steps[-1]
        if st.index == len(pts) - 1:  # a level of one run: the next run tells whether it holds
            step = f"latest run only: {st.before:.4g} → {st.after:.4g}"
        else:
            bad = st in s.worse_steps()
            step = (f"{'REGRESSION' if bad else 'step'} {st.before:.4g} → {st.after:.4g} from "
                    f"{pts[st.index].run.run_id}")
    return _fmt(s.metric, pts[-2]), latest, rel, step


def _headline(page: TrendPage) -> list[Series]:
    """The latest-change table's rows: each group's headline metrics and every metric with a step; regressions first."""
    rows = [s for s in page.series.values()
            if s.steps or s.metric in ("tau", "speedup", "output_tps", "equivalence.overall")
            or s.metric.startswith("accuracy.")]
    return sorted(rows, key=lambda s: (not s.worse_steps(), not s.steps, s.group_id, s.metric))


def _groups(page: TrendPage) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = {}
    for s in page.series.values():
        out.setdefault(s.group_id, []).append(s)
    return out


def _esc(x: str) -> str:
    return x.replace("|", "\\|")


def render_trend_markdown(page: TrendPage) -> str:
    lines = [f"# specbench trend: {page.suite}", "",
             f"Hardware class: {page.hardware_class}. {len(page.runs)} runs, oldest first. Values are shown "
             "with their 95% intervals; steps are detected over each metric's runs (specbench.regression.changepoints).", "",
             "## Runs", "", "| # | Run | Date | Commit | specbench | vLLM |", "|---:|---|---|---|---|---|"]
    for i, r in enumerate(page.runs, 1):
        lines.append(f"| {i} | {r.run_id} | {r.created_at} | {r.git_commit or '–'} | {r.specbench_version or '–'} "
                     f"| {r.vllm_version or '–'} |")
    lines += ["", "## Latest change per group", "", "Headline metrics and every metric with a detected step "
              "(regressions first); every metric is in the group tables below.", "",
              "| Group | Metric | Previous | Latest | Δ | Step |", "|---|---|---|---|---|---|"]
    for s in _headline(page):
        prev, latest, rel, step = _latest_change(s)
        lines.append(f"| {_esc(s.group_id)} | {s.metric} | {prev} | {latest} | {rel} | {_esc(step)} |")
    for gid, ss in _groups(page).items():
        lines += ["", f"## {gid}", "", "| Run | " + " | ".join(s.metric for s in ss) + " |",
                  "|---|" + "---|" * len(ss)]
        for r in page.runs:
            cells = []
            for s in ss:
                p = next((p for p in s.points if p.run.run_id == r.run_id), None)
                cells.append(_fmt(s.metric, p) if p else "–")
            lines.append(f"| {r.run_id} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _figure_series(ss: list[Series]) -> list[Series]:
    out = []
    for prefix in FIGURE_METRICS:
        out += [s for s in ss if not s.is_verdict
                and (s.metric == prefix or (prefix.endswith(".") and s.metric.startswith(prefix)))]
    return out[:MAX_PANELS]


def group_figure(gid: str, ss: list[Series], runs: list[RunInfo]) -> bytes | None:
    from specbench.report.figure import new_figure, to_png

    panels = _figure_series(ss)
    if not panels:
        return None
    index = {r.run_id: i for i, r in enumerate(runs)}
    fig, axes = new_figure(len(panels), cols=min(3, len(panels)), panel=(4.6, 3.0))
    for ax, s in zip(axes, panels, strict=True):
        xs = [index[p.run.run_id] for p in s.points]
        ys = [float(p.estimate.value or 0.0) for p in s.points]  # points with a value only (build_pages)
        lo = [p.estimate.ci_low if p.estimate.ci_low is not None else y for p, y in zip(s.points, ys, strict=True)]
        hi = [p.estimate.ci_high if p.estimate.ci_high is not None else y for p, y in zip(s.points, ys, strict=True)]
        ax.fill_between(xs, lo, hi, color="#1f77b4", alpha=0.18, linewidth=0, label="95% interval")
        ax.plot(xs, ys, "o-", color="#1f77b4", markersize=4, linewidth=1.4, label=s.metric)
        worse = s.worse_steps()
        for st in s.steps:
            x = xs[st.index] - 0.5
            ax.axvline(x, color="#d62728" if st in worse else "#5f6368", linestyle="--", linewidth=1.2)
        if worse:
            ax.plot([xs[st.index] for st in worse], [ys[st.index] for st in worse], "o", color="#d62728",
                    markersize=8, label="first run of a worse level")
        ax.set_title(s.metric + ("  (lower is better)" if not higher_is_better(s.metric) else ""), fontsize=9)
        ax.set_xlabel("run #", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlim(-0.5, max(len(runs) - 0.5, 0.5))
        ax.legend(fontsize=6, loc="best")
    return to_png(fig, gid)


CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#202124;max-width:1400px}
table{border-collapse:collapse;margin:1em 0;font-size:13px;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #dadce0;padding:3px 8px;white-space:nowrap}
th{background:#f1f3f4}td.bad{color:#b31412;font-weight:600}img{max-width:100%;border:1px solid #dadce0}
code{background:#f1f3f4}"""


def render_trend_html(page: TrendPage) -> str:
    e = html.escape
    out = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>specbench trend: {e(page.suite)}"
           f"</title><style>{CSS}</style></head><body>", f"<h1>specbench trend: {e(page.suite)}</h1>",
           f"<p>Hardware class: <code>{e(page.hardware_class)}</code>. {len(page.runs)} runs, oldest first "
           "(run # on the x axes). Bands: 95% intervals. Dashed lines: detected steps; red: the first run of a "
           "worse level.</p>", "<h2>Latest change per group</h2>",
           "<table><tr><th>Group</th><th>Metric</th><th>Previous</th><th>Latest</th><th>Δ</th><th>Step</th></tr>"]
    groups = _groups(page)
    for s in _headline(page):
        prev, latest, rel, step = _latest_change(s)
        cls = " class=bad" if step.startswith("REGRESSION") else ""
        out.append(f"<tr><td>{e(s.group_id)}</td><td>{e(s.metric)}</td><td>{e(prev)}</td><td>{e(latest)}</td>"
                   f"<td>{e(rel)}</td><td{cls}>{e(step)}</td></tr>")
    out.append("</table><h2>Runs</h2><table><tr><th>#</th><th>Run</th><th>Date</th><th>Commit</th>"
               "<th>specbench</th><th>vLLM</th></tr>")
    for i, r in enumerate(page.runs):
        out.append(f"<tr><td>{i}</td><td>{e(r.run_id)}</td><td>{e(r.created_at)}</td><td>{e(r.git_commit or '–')}"
                   f"</td><td>{e(r.specbench_version or '–')}</td><td>{e(r.vllm_version or '–')}</td></tr>")
    out.append("</table>")
    for gid, ss in groups.items():
        out.append(f"<h2>{e(gid)}</h2>")
        png = group_figure(gid, ss, page.runs)
        if png:
            out.append(f'<img alt="{e(gid)} over runs" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
        out.append("<table><tr><th>Run</th>" + "".join(f"<th>{e(s.metric)}</th>" for s in ss) + "</tr>")
        for r in page.runs:
            cells = []
            for s in ss:
                p = next((p for p in s.points if p.run.run_id == r.run_id), None)
                cells.append(f"<td>{e(_fmt(s.metric, p)) if p else '–'}</td>")
            out.append(f"<tr><td>{e(r.run_id)}</td>{''.join(cells)}</tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", s).strip("-")[:80] or "x"


def write_trend(hist: History, out_dir: Path, suite: str | None = None) -> dict[str, dict[str, Path]]:
    """Write ``<suite>[--<hardware>].md/.html`` per page; returns {page name: {"markdown": …, "html": …}}."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict[str, Path]] = {}
    pages = build_pages(hist, suite)
    for page in pages:
        same = [p for p in pages if p.suite == page.suite]
        name = _slug(page.suite) + ("" if same[0] is page else f"--{_slug(page.hardware_class)}")
        md, ht = out_dir / f"trend-{name}.md", out_dir / f"trend-{name}.html"
        md.write_text(render_trend_markdown(page))
        ht.write_text(render_trend_html(page))
        written[name] = {"markdown": md, "html": ht}
    return written
