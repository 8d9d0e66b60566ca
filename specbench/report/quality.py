"""Report sections on quality and serving: output equivalence and greedy identity, serving tables,
the reference cross-check, the run's checks and what did not run (blocks of
:mod:`specbench.report.document`, built into the report by :func:`specbench.report.build.build_report`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from specbench.report.document import Block, Details, Para, Pre, Section, Table
from specbench.report.method_sections import (
    serving_table,
)
from specbench.results.fmt import (
    as_estimate,
    dataset_label,
    fmt_est,
    fmt_generic,
    fmt_load,
    fmt_speedup,
)
from specbench.results.parts import ServingSpeedupRow
from specbench.results.slices import split_group_id
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate

_EQ_NUMBERS = ("n", "n_tokens", "n_identical", "n_near_tie", "n_divergent", "n_unverifiable", "match_rate",
               "pvalue", "detectable_tv", "target_tv")


def _tail(text: str, lines: int = 25, chars: int = 3000) -> str:
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out if len(out) <= chars else "…" + out[-chars:]


def _one_line(text: str | None, limit: int = 400) -> str:
    if not text:
        return "–"
    s = re.sub(r"\s+", " ", text).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def equivalence_entries(g: GroupSummary) -> list[tuple[str, dict[str, Any]]]:
    """(test, its result as stored) of a measured group's equivalence tests; none for a group that did not run."""
    if g.equivalence is None or g.status not in ("ok", "partial"):
        return []
    return [(test, result.model_dump(mode="json")) for test, result in g.equivalence.tests(g.temperature)]


def verdict_label(g: GroupSummary, eq: dict[str, Any]) -> str:
    """A test's verdict as the reports show it (a lossy group's divergence is its construction)."""
    return str(eq.get("verdict", "unknown")) + (" (lossy by construction)" if g.lossy else "")


def _equivalence(summary: RunSummary) -> Section | None:
    rows = []
    for g in summary.whole_groups:
        for test, eq in equivalence_entries(g):
            nums = [f"{k}={fmt_generic(k, eq[k])}" for k in _EQ_NUMBERS if eq.get(k) is not None]
            ci = eq.get("match_ci")
            if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci):
                nums = [f"{x} [{ci[0]:.3g}, {ci[1]:.3g}]" if x.startswith("match_rate=") else x for x in nums]
            evidence = "; ".join(x for x in [_one_line(eq.get("reason"), 300) if eq.get("reason") else "",
                                             ", ".join(nums)] if x)
            rows.append([g.target, dataset_label(g.dataset, g.group_id), g.method, f"{g.temperature:g}", fmt_load(g), test,
                         verdict_label(g, eq), evidence or "–"])
    if not rows:
        return None
    blocks: list[Block] = [
        Para("Lossless check against the baseline: 'equivalent' means a difference of the stated size would "
             "have been detected; 'not shown equivalent' means the data could not tell; 'divergent' is a "
             "real difference."),
        Table(["Target", "Dataset", "Method", "T", "Load", "Test", "Verdict", "Evidence"], rows),
    ]
    greedy = _greedy_identity(summary)
    if greedy is not None:
        blocks += [Para("Greedy identity per method: a flip whose gap (nats from the baseline's top token to the "
                        "method's, ≥ a bound where the token was outside the recorded top-k) is within the "
                        "tolerance of the engines' dtype is a near-tie (numerical noise); above it, divergent."),
                   greedy]
    return Section("Equivalence", blocks, anchor="equivalence")


def _gap_list(gaps: Any, largest: bool) -> str:
    vals = [float(x) for x in gaps or [] if isinstance(x, (int, float))]
    if not vals:
        return ""
    shown = sorted(vals, reverse=largest)[:4]
    more = f" (+{len(vals) - len(shown)})" if len(vals) > len(shown) else ""
    return ", ".join(f"{x:.3g}" for x in shown) + more


def _greedy_identity(summary: RunSummary) -> Table | None:
    """Identical / near-tie / divergent counts per method, with the tolerance and the flips' gaps."""
    rows = []
    for g in summary.whole_groups:
        eq = dict(equivalence_entries(g)).get("greedy")
        if not eq or eq.get("tie_tolerance") is None:
            continue
        tol = f"{eq['tie_tolerance']:g} ({eq.get('tolerance_from', '?')})"
        gaps = "; ".join(x for x in [
            f"near-tie ≤ {_gap_list(eq.get('near_tie_gaps'), largest=True)}" if eq.get("near_tie_gaps") else "",
            f"divergent ≥ {_gap_list(eq.get('divergent_gaps'), largest=False)}" if eq.get("divergent_gaps") else "",
        ] if x)
        rows.append([g.target, dataset_label(g.dataset, g.group_id), g.method, fmt_load(g), str(eq.get("n", "–")), str(eq.get("n_identical", "–")),
                     str(eq.get("n_near_tie", "–")), str(eq.get("n_divergent", "–")),
                     str(eq.get("n_unverifiable", "–")), tol, gaps or "–"])
    if not rows:
        return None
    return Table(["Target", "Dataset", "Method", "Load", "n", "Identical", "Near-tie", "Divergent", "Unverifiable",
                  "Tolerance (nats)", "Gaps (nats)"], rows)


def _rows_table(rows: list[dict[str, Any]]) -> Table:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    return Table(keys, [[fmt_generic(k, r.get(k)) for k in keys] for r in rows])


def _generic_blocks(data: Any) -> list[Block]:
    """Any JSON-ish value as tables: a list of rows, a dict of lists, or key/value pairs."""
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        data = data["rows"]
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        return [_rows_table(data)]
    if isinstance(data, dict):
        if all(isinstance(v, list) and v and all(isinstance(r, dict) for r in v) for v in data.values()):
            return [Section(str(k), [_rows_table(v)], level=3) for k, v in data.items()]
        return [Table(["Key", "Value"], [[str(k), fmt_generic(str(k), v)] for k, v in data.items()])]
    return [Pre(json.dumps(data, indent=2, sort_keys=True, default=str))]


def serving_measurements(summary: RunSummary) -> list[dict[str, Any]]:
    """Every stored serving row (:attr:`~specbench.results.parts.SummaryExtra.serving`) as a flat dict for the
    report's "All serving measurements" table (a speedup's estimate under ``speedup``)."""
    out = []
    for r in summary.extra.serving:
        row = r.model_dump(mode="json", exclude_none=True)
        if isinstance(r, ServingSpeedupRow):
            row["speedup"] = row.pop("estimate")
        out.append(row)
    return out


def _serving(summary: RunSummary, markdown: bool) -> Section | None:
    if not summary.extra.serving:
        return None
    readable = serving_table(summary)
    blocks: list[Block] = [readable] if readable is not None else []
    rows = [r for r in summary.extra.serving_speedups if _serving_load(r) is not None]
    for kind, text, col in (("concurrency", "concurrency", "c={}"), ("rate", "request rate (Poisson arrivals)",
                                                                     "{} req/s")):
        part = [r for r in rows if _serving_load(r)[0] == kind]  # type: ignore[index]
        if part:
            blocks += [Para(f"Speedup over the baseline by {text} (95% intervals):"), _serving_pivot(part, col)]
    blocks.append(Details("All serving measurements", _generic_blocks(serving_measurements(summary))))
    return Section("Serving", blocks, anchor="serving")


def _serving_load(r: ServingSpeedupRow) -> tuple[str, float] | None:
    """``("rate", r/s)`` or ``("concurrency", c)`` of a speedup row; ``None`` without a load."""
    if r.request_rate is not None:
        return "rate", r.request_rate
    if r.concurrency is not None:
        return "concurrency", r.concurrency
    return None


def _serving_pivot(rows: list[ServingSpeedupRow], col: str) -> Table:
    levels = sorted({_serving_load(r)[1] for r in rows})  # type: ignore[index]
    pivot: dict[tuple[str, ...], dict[float, Estimate]] = {}
    for r in rows:
        where = " · ".join(x for x in (r.target, r.dataset) if x) or "–"
        pivot.setdefault((where, r.method, r.metric), {})[_serving_load(r)[1]] = r.estimate  # type: ignore[index]
    return Table(["Where", "Method", "Metric"] + [col.format(f"{c:g}") for c in levels],
                 [[*k, *(fmt_speedup(v.get(c), n_default=None) for c in levels)] for k, v in pivot.items()])


def _cross_check(summary: RunSummary) -> Section | None:
    data = summary.extra.cross_check
    if not data:
        return None
    rows = []
    for r in (dict(row) for row in data):  # its fields, and any an older summary kept
        ref = as_estimate(r.get("reference_tau", r.get("reference")))
        vll = as_estimate(r.get("vllm_tau", r.get("vllm")))
        part = split_group_id(str(r.get("vllm_group", "")))[1].id  # a slice (turn=2) of the group
        rows.append([str(r.get("target", "–")), str(r.get("dataset", "–")) + (f" · {part}" if part else ""),
                     str(r.get("method", "–")),
                     fmt_est(ref, 2), fmt_est(vll, 2),
                     fmt_est(as_estimate(r.get("reference_tokens_per_step")), 3),
                     fmt_est(as_estimate(r.get("vllm_tokens_per_step")), 3),
                     _agreement(r, ref, vll), _one_line(r.get("note"), 200)])
    return Section("Reference cross-check", [
        Para("τ from specbench's reference decoder versus τ measured in vLLM, same prompts and drafter. "
             "FLAG: differs — the 95% intervals do not overlap; FLAG: served ≠ trained — vLLM serves the "
             "draft block with an attention the drafter was not trained with (from its config)."),
        Para("Self-drafting is the known answer: τ = K+1 exactly in vLLM's definition (vllm_tau, which counts "
             "drafts accepted past the end); tokens per step is K+1 less the terminal overcount."),
        Table(["Target", "Dataset", "Method", "Reference τ", "vLLM τ", "Reference tokens/step", "vLLM tokens/step",
               "Agreement", "Note"], rows),
    ], anchor="cross-check")


def _agreement(r: dict[str, Any], ref: Any, vll: Any) -> str:
    for key in ("agree", "ok"):
        if isinstance(r.get(key), bool):
            return "agrees" if r[key] else "FLAG: differs"
    flag = r.get("flag")
    if isinstance(flag, bool):
        if flag:
            return "FLAG: differs"
        return "FLAG: served ≠ trained (τ agrees)" if r.get("config_mismatch") else "agrees"
    if flag:
        return str(flag)
    if ref is not None and vll is not None and None not in (ref.ci_low, ref.ci_high, vll.ci_low, vll.ci_high):
        overlap = ref.ci_low <= vll.ci_high and vll.ci_low <= ref.ci_high
        return "agrees (intervals overlap)" if overlap else "FLAG: intervals do not overlap"
    return "–"


def _checks(summary: RunSummary) -> Section:
    checks = summary.checks
    if not checks:
        return Section("Checks", [Para("No checks recorded.")], anchor="checks")
    failed = [c for c in checks if not c.ok]
    table = Table(["Group", "Check", "Result"],
                  [[c.group_id, c.check, "ok" if c.ok else "FAILED"]
                   for c in checks])
    if not failed:
        return Section("Checks", [Para(f"All {len(checks)} checks passed."), Details("All checks", [table])],
                       anchor="checks")
    return Section("Checks", [
        Para(f"{len(failed)} of {len(checks)} checks FAILED:"),
        Table(["Group", "Check", "Result"], [[c.group_id, c.check, "FAILED"] for c in failed]),
        Details("All checks", [table]),
    ], anchor="checks")


def _not_run(summary: RunSummary) -> Section:
    """Cells that did not run, one row per (target, method, status, reason); identical log tails once."""
    rows: dict[tuple[str, str, str, str], list[str]] = {}
    logs: dict[str, list[str]] = {}
    for g in summary.whole_groups:
        prefix = f"{g.target}/{g.method}/"
        for c in g.cells:
            if c.status == "ok":
                continue
            reason = _one_line(c.reason or ("not run" if c.status == "pending" else None))
            short = c.cell_id[len(prefix):] if c.cell_id.startswith(prefix) else c.cell_id
            rows.setdefault((g.target, g.method, c.status, reason), []).append(short)
            if c.status == "failed" and c.engine_log_tail:
                logs.setdefault(_tail(c.engine_log_tail), []).append(c.cell_id)
    if not rows:
        return Section("Skipped and failed cells", [Para("None: every cell ran.")], anchor="not-run")
    table = Table(["Target", "Method", "Status", "Reason", "Cells"],
                  [[*key, f"{len(cs)}: " + ", ".join(cs)] for key, cs in rows.items()])
    details: list[Block] = [
        Details(f"Log tail of {cells[0]}" + (f" (and {len(cells) - 1} more cells with the same log)"
                                              if len(cells) > 1 else ""), [Pre(text)])
        for text, cells in logs.items()
    ]
    return Section("Skipped and failed cells", [table, *details], anchor="not-run")


