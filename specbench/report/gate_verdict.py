"""The regression gate's verdict in Markdown (``specbench gate``; the CI job summary): every failing rule with its
numbers, then warnings, what the speed rules can see, and the passing checks folded away."""

from __future__ import annotations

from specbench.regression.gate import GateResult


def render_gate(result: GateResult) -> str:
    """Markdown verdict: every failing rule with its numbers, then warnings, then all checks."""
    head = {"pass": "PASS", "regression": "FAIL", "bad input": "ERROR", "nothing measured": "ERROR"}[result.status]
    lines = [f"## specbench gate: {head} (exit {result.exit_code}, {result.status})", "",
             f"Baseline: {result.baseline}. {len(result.checks)} checks; differences at "
             f"{100 * result.confidence:g}% " + (f"family-wise over {result.n_comparisons} comparisons "
                                                 f"(intervals ×{result.widen:.2f})." if result.n_comparisons else "."),
             ""]
    lines += [f"- ERROR: {e}" for e in result.errors]
    if result.failures:
        lines += [f"Failing rules ({len(result.failures)}):", ""] + [f"- {c.message}" for c in result.failures]
    lines += [""] if result.failures or result.errors else []
    if result.warnings:
        lines += ["Warnings:", ""] + [f"- {w}" for w in result.warnings] + [""]
    if result.notes:
        lines += ["What the speed rules can see:", ""] + [f"- {n}" for n in result.notes] + [
            "- Speed compared between runs made at different times is a trend, not a gate: to gate speed, "
            "measure both sides in one job (`specbench ab`, docs/ab.md).", ""]
    passed = [c for c in result.checks if c.passed]
    if passed:
        lines += ["<details>", f"<summary>{len(passed)} passing checks</summary>", ""]
        lines += [f"- {c.message}" for c in passed] + ["", "</details>", ""]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
