"""Number formatting shared by every renderer (Markdown, HTML, compare, gate, trend).

Pure and light: no matplotlib or jinja2 here, and no import of the renderers,
so every report module (and the run-level modules that print numbers) can
depend on it without a cycle.
"""

from __future__ import annotations

from typing import Any

from specbench.config.plan import load_label
from specbench.results import metric_catalog
from specbench.results.slices import Slice, split_group_id
from specbench.results.summary import GroupSummary, RunSummary
from specbench.stats import Estimate


def as_estimate(x: Any) -> Estimate | None:
    """An Estimate from an Estimate, an Estimate-like dict or a bare number."""
    if x is None or isinstance(x, Estimate):
        return x
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return Estimate(value=float(x))
    if isinstance(x, dict) and "value" in x:
        def num(key: str) -> float | None:
            v = x.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return Estimate(value=num("value"), ci_low=num("ci_low"), ci_high=num("ci_high"),
                        n=int(x.get("n") or 0), method=str(x.get("method", "none")))
    return None


def auto_digits(v: float | None) -> int:
    """Decimals that keep three or so significant digits (1234 → 0, 56.7 → 1, 0.89 → 2)."""
    if v is None:
        return 2
    a = abs(v)
    return 0 if a >= 100 else 1 if a >= 10 else 2


def n_note(e: Estimate | None, n_default: int | None) -> str:
    """' (n=…)' when the estimate rests on a different n than the row's (always when no default)."""
    if e is None or not e.n or e.value is None:
        return ""
    return f" (n={e.n})" if n_default is None or e.n != n_default else ""


def fmt_est(
    e: Estimate | None,
    digits: int = 2,
    *,
    scale: float = 1.0,
    unit: str = "",
    signed: bool = False,
    n_default: int | None = -1,
    bound: float | None = None,
) -> str:
    """'2.85 [2.71, 2.99]'; '–' when there is no value.

    ``n_default`` is the n the reader already sees (a table's n column); the
    estimate's own n is appended when it differs. ``-1`` never shows n.
    ``bound``: interval ends beyond [1/bound, bound] read '<1/bound' / '>bound' (a ratio's interval from
    two or three rounds can reach 10⁶; its digits say nothing).
    """
    if e is not None and e.value is None and e.method == "bounds" and e.ci_low is not None and e.ci_high is not None:
        lo, hi = e.ci_low * scale, e.ci_high * scale  # labelled bounds: what the records allow, no estimate
        return f"{lo:.{digits}f}–{hi:.{digits}f}{unit} (bounds)" + ("" if n_default == -1 else n_note(e, n_default))
    if e is None or e.value is None:
        return "–"
    sign = "+" if signed else ""

    def f(x: float) -> str:
        v = x * scale
        if round(v, digits) == 0:
            v = 0.0  # no "-0.0"
        return f"{v:{sign}.{digits}f}"

    def end(x: float) -> str:
        if bound is not None and x * scale > bound:
            return f">{bound:g}"
        if bound is not None and x * scale < 1 / bound:
            return f"<{1 / bound:g}"
        return f(x)

    out = f(e.value) + unit
    if e.ci_low is not None and e.ci_high is not None:
        out += f" [{end(e.ci_low)}, {end(e.ci_high)}]"
    if e.rounds is not None and e.rounds > 1:
        out += f" ({e.rounds} rounds)"  # a speed interval over rounds (issue 22)
    return out + ("" if n_default == -1 else n_note(e, n_default))


def fmt_metric(metric: str, e: Estimate | None, **kw: Any) -> str:
    """An estimate of a catalogued metric with the catalogue's digits (:func:`fmt_est`'s keywords)."""
    return fmt_est(e, metric_catalog.digits(metric, e.value if e else None), **kw)


def fmt_column(m: metric_catalog.MetricSpec, g: GroupSummary) -> str:
    """A group's value of ``m`` as the results table writes it: as its declaration says (``fmt``, what a
    baseline shows, whose n), with the n when it differs from the group's requests."""
    if g.method_kind == "baseline" and m.on_baseline is not None:
        return m.on_baseline
    held = g.held(m)
    n = None if m.own_n else g.n_requests
    if m.fmt == "positions":
        d = metric_catalog.digits(m.name, None)
        pos = " / ".join("–" if p.value is None else f"{p.value:.{d}f}" for p in held or [])
        return (pos + n_note(held[0], n)) if held else "–"
    if m.fmt == "percent":
        return fmt_pct(held, n_default=n)
    if m.fmt == "rate":
        return fmt_tps(held, n_default=n)
    if m.fmt == "ratio":
        return fmt_speedup(held, n_default=n)
    return fmt_metric(m.name, held, n_default=n)


def fmt_pct(e: Estimate | None, digits: int = 1, *, n_default: int | None = -1, signed: bool = False,
            unit: str = "%") -> str:
    return fmt_est(e, digits, scale=100.0, unit=unit, signed=signed, n_default=n_default)


#: A speedup's interval ends beyond [1/100, 100] are shown as bounds, not digits.
SPEEDUP_BOUND = 100.0


def fmt_speedup(e: Estimate | None, *, n_default: int | None = -1) -> str:
    return fmt_est(e, 2, unit="×", n_default=n_default, bound=SPEEDUP_BOUND)


def fmt_tps(e: Estimate | None, *, n_default: int | None = -1) -> str:
    return fmt_est(e, auto_digits(e.value if e else None), n_default=n_default)


def fmt_generic(key: str, value: Any) -> str:
    """A value of unknown shape, formatted by its kind (and its key, for Estimate-likes)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, Estimate)):
        est = as_estimate(value)
        if est is not None:
            if "speedup" in key:
                return fmt_speedup(est, n_default=None)
            return fmt_est(est, auto_digits(est.value), n_default=None)
        return "; ".join(f"{k}={fmt_generic(str(k), v)}" for k, v in value.items())  # type: ignore[union-attr]
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_generic(key, v) for v in value)
    return str(value)


def fmt_load(g: GroupSummary) -> str:
    """A group's load: ``8`` (batch size or concurrency) or ``2 req/s`` (a Poisson request rate)."""
    return load_label(g.batch_size, g.request_rate)


def fmt_slice(s: Slice | None) -> str:
    """A slice for people, short: 'coding, turn 2, 768 tok, round 1' ('' for the whole group)."""
    if s is None:
        return ""
    words = {"category": "{}", "turn": "turn {}", "input_tokens": "{} tok", "round": "round {}"}
    return ", ".join(words.get(k, k + " {}").format(v) for k, v in s.items())


def dataset_label(dataset: str, group_id: str) -> str:
    """A group's dataset with its slice, as tables show it: 'code' or 'code 768 tok'."""
    label = fmt_slice(split_group_id(group_id)[1])
    return f"{dataset} {label}" if label else dataset


def speed_intervals_note(summary: RunSummary, *, short: bool = False) -> str:
    """What a run's speed intervals include: the between-run noise of an A/A calibration, or the spread
    within this run only (issue 22). ``short``: one clause for the terminal."""
    cal, why = summary.extra.speed_noise, summary.extra.speed_noise_note
    if cal is not None:
        if short:
            return f"speed intervals include between-run noise (A/A calibration on {len(cal.runs)} runs)"
        return f"Speed intervals include the between-run noise of an {cal.describe()} (`specbench calibrate`)."
    if short:
        return "speed intervals: this run only (no A/A calibration: specbench calibrate)"
    return ("Speed intervals cover the spread within this run only (its prompts, and its rounds if any), not drift "
            "between runs: a rerun may land outside them. `specbench calibrate` on identical-code runs adds that "
            "noise." + (f" A calibration was found but {why}." if why else ""))
