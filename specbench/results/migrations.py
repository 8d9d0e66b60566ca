"""Versions of the stored JSON files and the loaders that bring an older one up to date.

Each file carries ``schema_version``. The current writers produce
:data:`SUMMARY_SCHEMA_VERSION` / :data:`MANIFEST_SCHEMA_VERSION`; every older
version keeps one loader (:data:`SUMMARY_MIGRATIONS`, :data:`MANIFEST_MIGRATIONS`)
that brings it one step up, so a history can read every run it ever stored.
Fixtures of each older version live in ``tests/fixtures/schema/``.

Versions
--------
summary 1: ``checks`` and ``extra`` untyped. Some early writers nested the
serving rows or cross-check rows under ``{"rows": [...]}``.
summary 2: ``checks`` are :class:`CounterCheck`; ``extra`` is
:class:`SummaryExtra` (``serving``, ``cross_check``, ``scoring_notes`` typed,
other keys kept as they are).
Later, optional (no new version: a summary without them loads as it was, and one
without degenerate outputs measured is never marked): a group's ``metrics`` holds
``degenerate_share`` and ``short_share`` (issue 34), its ``non_degenerate`` τ, tokens
per step and speedup (written only when computed), a category-matrix cell its
``reference_group``, and a serving cell row its ``vs_baseline`` / ``vs_reference`` ratios (the report's
serving table shows "–" for a summary stored without them).

``equivalence.jsonl`` rows carry no version: every row written so far (a scored request, one that could not
be scored with its error, or a target's error) reads as a :class:`~specbench.results.requests.ScoreRow` as it
is; a row without ``sample_index`` is sample 0, as every reader took it.

manifest 1 (or no version): a dict of run facts.
manifest 2: :class:`RunManifest`, adds ``hardware_class`` (what a history
compares runs within) and ``specbench_version``; later, optional (no new
version): ``time_breakdown`` (:class:`TimeBreakdown`) and ``timeline`` (its spans).

The typed parts read like the dicts they were (``part["key"]``,
``part.get("key")``, ``"key" in part``) so code written against the dicts
keeps working; new code should use attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SUMMARY_SCHEMA_VERSION = 2
MANIFEST_SCHEMA_VERSION = 2


class SchemaError(ValueError):
    pass


def hardware_class(hw: dict[str, Any]) -> str:
    """What a history compares runs within: the GPU models (or the CPU model) and their count."""
    gpus = [str(g.get("name") if isinstance(g, dict) else g).split(",")[0].strip() for g in hw.get("gpus") or []]
    gpus = [g for g in gpus if g and g != "None"]
    if gpus:
        names = sorted(set(gpus))
        return "gpu:" + "+".join(f"{len([g for g in gpus if g == n])}x{n}" for n in names)
    cpu = str(hw.get("cpu") or hw.get("machine") or "unknown")
    return f"cpu:{cpu}" + (f" x{hw['cpu_count']}" if hw.get("cpu_count") else "")


# --------------------------------------------------------------------------
# loaders of older versions: each takes version v and returns version v + 1


def _rows(x: Any) -> Any:
    """v1 writers sometimes nested a list under "rows" or "speedups"."""
    if isinstance(x, dict):
        for key in ("rows", "speedups"):
            if isinstance(x.get(key), list):
                return x[key]
    return x


def _serving_v1(r: dict[str, Any]) -> dict[str, Any] | None:
    """A v1 serving row: a cell row, a Speedup row, or a hand-made row with its speedup under "speedup"."""
    if r.get("kind") == "cell" or "estimate" in r:
        return r
    if not isinstance(r.get("speedup"), dict):
        return None  # a shape nothing produces: nothing to keep
    keep: dict[str, Any] = {k: r[k] for k in ("target", "dataset", "temperature", "method", "concurrency", "request_rate") if k in r}
    n = int(r["speedup"].get("n") or 0)
    return {**keep, "metric": "throughput", "estimate": r["speedup"], "n_method": n, "n_baseline": n}


def _cross_check_v1(r: dict[str, Any]) -> dict[str, Any]:
    """v1 cross-check rows may say "agree"/"ok" (the reverse of "flag") and "vllm"/"reference"."""
    out = dict(r)
    for old, new in (("vllm", "vllm_tau"), ("reference", "reference_tau")):
        if old in out and new not in out:
            out[new] = out.pop(old)
    for key in ("agree", "ok"):
        if key in out:
            agree = out.pop(key)
            out.setdefault("flag", not agree)
    out.setdefault("note", "")
    return out


def _summary_v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    extra = dict(d.get("extra") or {})
    if "serving" in extra:
        extra["serving"] = [x for x in (_serving_v1(r) for r in _rows(extra["serving"]) or [] if isinstance(r, dict))
                            if x is not None]
    if "cross_check" in extra:
        extra["cross_check"] = [_cross_check_v1(r) for r in _rows(extra["cross_check"]) or [] if isinstance(r, dict)]
    if "scoring_notes" in extra and isinstance(extra["scoring_notes"], str):
        extra["scoring_notes"] = [extra["scoring_notes"]]
    checks = [{**c, "ok": bool(c.get("ok"))} for c in d.get("checks") or [] if isinstance(c, dict)]
    return {**d, "schema_version": 2, "checks": checks, "extra": extra}


def _manifest_v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    out = {**d, "schema_version": 2}
    out.setdefault("hardware_class", hardware_class(d.get("hardware") or {}))
    out.setdefault("specbench_version", (d.get("versions") or {}).get("specbench"))
    if isinstance(out.get("resumed_at"), str):
        out["resumed_at"] = [out["resumed_at"]]
    return out


SUMMARY_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _summary_v1_to_v2}
MANIFEST_MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _manifest_v1_to_v2}


def _upgrade(d: dict[str, Any], current: int, steps: dict[int, Callable], what: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise SchemaError(f"{what}: expected a JSON object")
    v = d.get("schema_version", 1)
    if not isinstance(v, int) or v < 1:
        raise SchemaError(f"{what}: bad schema_version {v!r}")
    if v > current:
        raise SchemaError(f"{what} schema {v} is newer than this specbench ({current}); upgrade specbench")
    while v < current:
        d = steps[v](d)
        v = d["schema_version"]
    return d


def upgrade_summary(d: dict[str, Any]) -> dict[str, Any]:
    """A stored summary dict of any version, as the current version's dict."""
    return _upgrade(d, SUMMARY_SCHEMA_VERSION, SUMMARY_MIGRATIONS, "summary")


def upgrade_manifest(d: dict[str, Any]) -> dict[str, Any]:
    """A stored manifest dict of any version, as the current version's dict."""
    return _upgrade(d, MANIFEST_SCHEMA_VERSION, MANIFEST_MIGRATIONS, "manifest")


