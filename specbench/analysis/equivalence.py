"""Equivalence verdicts of a run, from its records alone: greedy identity against the baseline and
the sampled (PIT) test on the teacher-forced scores in ``equivalence.jsonl``; the statistics are
:mod:`specbench.analysis.lossless`'s.

* Greedy (temperature 0): each speculative group's outputs are paired with
  the baseline group's (same target, dataset, temperature and load; paired
  by prompt, sample and repeat) and compared token by token, with the
  baseline's recorded top-k logprobs telling near-ties from real divergences
  (:func:`greedy_equivalence`).
* Sampled (temperature > 0): every generated token's ``F(x-)`` and ``p(x)`` under the plain target
  (written by the run's teacher-forcing job, :mod:`specbench.execution.teacher_forcing`) give
  randomized PIT values rebuilt with a seeded rng (:func:`sampled_equivalence`).

:func:`equivalence_summaries` merges both per group for the run's summary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specbench.analysis.lossless_greedy import (
    TIE_TOLERANCE_BY_DTYPE,
    canonical_dtype,
    compare_greedy,
    summarize_greedy,
    tie_tolerance_for,
)
from specbench.analysis.lossless_sampled import distribution_verdict
from specbench.analysis.metrics import complete_conversations, pair_turns
from specbench.analysis.pit import pit_from_row
from specbench.config.plan import Cell
from specbench.config.suite import EquivalenceSpec
from specbench.results import rundir
from specbench.results.manifest import RunManifest
from specbench.results.parts import Equivalence
from specbench.results.records import RequestRecord
from specbench.results.requests import ScoreRow
from specbench.results.slices import sliced_group_id, split_group_id
from specbench.stats import min_tokens_for_tv

SCORER = "vllm prompt_logprobs=-1 (full vocabulary, raw), temperature/top-p applied by specbench"
ORDER = "probability"
BASELINE_KIND = "baseline"


# ---------------------------------------------------------------------------
# helpers


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if np.isfinite(x) else None


# ---------------------------------------------------------------------------
# grouping


def _is_baseline(cell: Cell) -> bool:
    return cell.method_kind == BASELINE_KIND


def _groups(cells: Iterable[Cell]) -> tuple[dict[str, list[Cell]], dict[tuple, str]]:
    """Cells by group id, and the baseline group id by baseline key."""
    groups: dict[str, list[Cell]] = defaultdict(list)
    baselines: dict[tuple, str] = {}
    for c in cells:
        groups[c.group_id].append(c)
        if _is_baseline(c):
            baselines.setdefault(c.baseline_group_key, c.group_id)
    return groups, baselines


def _records_by_group(
    cells: Iterable[Cell], requests: Iterable[RequestRecord]
) -> dict[str, list[RequestRecord]]:
    cell_group = {c.cell_id: c.group_id for c in cells}
    out: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in complete_conversations(requests):
        gid = cell_group.get(r.cell_id)
        if gid is not None and r.error is None:
            out[gid].append(r)
    return out


# ---------------------------------------------------------------------------
# greedy


def greedy_equivalence(
    cells: Sequence[Cell],
    requests: Sequence[RequestRecord],
    *,
    engine_dtypes: Mapping[str, str | None] | None = None,
    tie_tolerance: float | None = None,
    max_examples: int = 5,
) -> dict[str, dict[str, Any]]:
    """Greedy identity of every non-baseline group at temperature 0 vs its baseline.

    Returns ``{group_id: {"greedy": {...}}}`` with the verdict, counts
    (``n``, ``n_identical``, ``n_near_tie``, ``n_divergent``,
    ``n_unverifiable``), ``match_rate`` with its Wilson interval, a reason,
    the gap (nats) of every near-tie and divergence, and up to
    ``max_examples`` ``first_divergences``. Requests without a baseline
    partner are counted in ``n_unpaired`` and left out.

    The near-tie tolerance is ``tie_tolerance`` when given (a suite's
    ``equivalence.tie_tolerance``), else the one of the coarser of the two
    engines' dtypes (``engine_dtypes``: engine key → dtype, as vLLM resolved
    it; :func:`~specbench.analysis.lossless_greedy.tie_tolerance_for`).
    """
    groups, baselines = _groups(cells)
    recs = _records_by_group(cells, requests)
    dtypes = dict(engine_dtypes or {})
    out: dict[str, dict[str, Any]] = {}
    for gid, gcells in groups.items():
        c0 = gcells[0]
        if _is_baseline(c0) or c0.temperature != 0:
            continue
        bgid = baselines.get(c0.baseline_group_key)
        if bgid is None:
            continue
        pair = [dtypes.get(c0.engine_key), dtypes.get(groups[bgid][0].engine_key)]
        if tie_tolerance is not None:
            tol, tol_from = float(tie_tolerance), "suite (equivalence.tie_tolerance)"
        else:
            tol, tol_from = tie_tolerance_for(pair)
        # A conversation's later turns count only after a token-identical turn 1 (same prompt then).
        turns = pair_turns(recs.get(gid, []), recs.get(bgid, []))
        exact = {(r.prompt_id, r.sample_index, r.repeat): r for r in turns.baseline}
        loose: dict[tuple[str, int], RequestRecord] = {}
        for r in sorted(turns.baseline, key=lambda r: r.repeat):
            loose.setdefault((r.prompt_id, r.sample_index), r)
        comps, which = [], []
        unpaired = 0
        for m in sorted(turns.method, key=lambda r: (r.repeat, r.prompt_id, r.sample_index)):
            b = exact.get((m.prompt_id, m.sample_index, m.repeat)) or loose.get((m.prompt_id, m.sample_index))
            if b is None:
                unpaired += 1
                continue
            comps.append(compare_greedy(b.output_token_ids, m.output_token_ids, b.logprobs, tie_tolerance=tol))
            which.append(m)
        s = summarize_greedy(comps)
        examples: list[dict[str, Any]] = [
            {
                "prompt_id": m.prompt_id,
                "sample_index": m.sample_index,
                "repeat": m.repeat,
                "position": c.first_divergence,
                "kind": c.kind,
                "gap": _finite(c.logprob_gap),
                "gap_is_bound": c.gap_is_bound,
                "baseline_token": c.baseline_token,
                "method_token": c.method_token,
            }
            for c, m in zip(comps, which, strict=False)
            if not c.identical
        ]
        # Real divergences first, then unverifiable ones, then near-ties.
        rank = {"divergent": 0, "unverifiable": 1, "near_tie": 2}
        examples.sort(key=lambda e: rank.get(e["kind"], 3))
        out[gid] = {
            "greedy": {
                "verdict": s.verdict,
                "reason": s.reason,
                "baseline_group": bgid,
                "n": s.n,
                "n_identical": s.n_identical,
                "n_near_tie": s.n_near_tie,
                "n_divergent": s.n_divergent,
                "n_unverifiable": s.n_unverifiable,
                "n_unpaired": unpaired,
                "match_rate": _finite(s.match_rate),
                "match_ci": list(s.match_ci),
                "consistent_rate": _finite(s.consistent_rate),
                "tie_tolerance": tol,
                "tolerance_from": tol_from,
                "dtypes": [canonical_dtype(d) or "unknown" for d in pair],
                "near_tie_gaps": _gaps(comps, "near_tie"),
                "divergent_gaps": _gaps(comps, "divergent"),
                "first_divergences": examples[:max_examples],
            }
        }
    return out


def _gaps(comps: Sequence[Any], kind: str) -> list[float]:
    """Sorted gaps (nats; a lower bound where the token was outside the top-k) of one kind of flip."""
    return sorted(g for c in comps if c.kind == kind and (g := _finite(c.logprob_gap)) is not None)


# ---------------------------------------------------------------------------
# sampled


def latest_scores(rows: Iterable[ScoreRow]) -> tuple[dict[tuple, ScoreRow], dict[tuple, str], list[str]]:
    """Scored rows by request key (a success wins over errors), errors, engine errors (rows of
    :func:`specbench.results.rundir.read_equivalence_rows`)."""
    ok: dict[tuple, ScoreRow] = {}
    err: dict[tuple, str] = {}
    engine_errors: list[str] = []
    for row in rows:
        key = row.request_key
        if key is None:
            if row.error:
                engine_errors.append(f"{row.target}: {row.error}")
            continue
        if row.scored:
            ok[key] = row
            err.pop(key, None)
        elif key not in ok:
            err[key] = str(row.error)
    return ok, err, engine_errors


def _group_pit(
    gcells: Sequence[Cell], recs: Sequence[RequestRecord], ok: dict[tuple, ScoreRow], err: dict[tuple, str]
) -> tuple[np.ndarray, int, int, list[str]]:
    """Concatenated PIT values of a group; counts of scored and unscored requests."""
    ids = {c.cell_id for c in gcells}
    parts: list[np.ndarray] = []
    errors: list[str] = []
    n_scored = n_missing = 0
    for r in sorted(recs, key=lambda r: (r.cell_id, r.prompt_id, r.sample_index)):
        if r.cell_id not in ids or not r.output_token_ids:
            continue
        key = (r.cell_id, r.prompt_id, r.sample_index)
        row = ok.get(key)
        if row is None:
            n_missing += 1
            if key in err and len(errors) < 3:
                errors.append(err[key])
            continue
        parts.append(pit_from_row(row))
        n_scored += 1
    u = np.concatenate(parts) if parts else np.zeros(0)
    return u, n_scored, n_missing, errors


def sampled_equivalence(
    run_dir: Path,
    cells: Sequence[Cell],
    requests: Sequence[RequestRecord],
    *,
    alpha: float = 0.01,
    power: float = 0.95,
    target_tv: float | None = None,
    torn: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """PIT verdict of every non-baseline group at temperature > 0, and of each conversation turn.

    Needs ``equivalence.jsonl`` (from the run's teacher-forcing job, :mod:`specbench.execution.teacher_forcing`). The
    method's PIT values are tested for uniformity and against the baseline
    group's own scored samples (:func:`~specbench.analysis.lossless_sampled.distribution_verdict`).
    Returns ``{group_id: {"sampled": {...}}}``; groups with nothing scored
    get ``"not shown equivalent"`` with the reason.

    A group of conversations with two or more turns also gets one entry per turn, under its
    turn slice's id (``…/turn=2``): the same test on that turn's samples only, against the
    baseline's samples of the same turn; the turns' requests and tokens add up to the group's.
    Unlike greedy identity and paired speedup, a later turn is *not* restricted to the
    conversations whose turn 1 matched the baseline's: the test is conditional on the prompt
    (each token's PIT is taken under the plain target given the history the method was sent,
    its own earlier replies included), so every turn's samples are tested on their own.
    """
    kw: dict[str, Any] = {"alpha": alpha, "power": power}
    if target_tv is not None:
        kw["target_tv"] = target_tv
    groups, baselines = _groups(cells)
    recs = _records_by_group(cells, requests)
    scores = latest_scores(rundir.read_equivalence_rows(run_dir, torn))
    out: dict[str, dict[str, Any]] = {}
    for gid, gcells in groups.items():
        c0 = gcells[0]
        if _is_baseline(c0) or c0.temperature <= 0:
            continue
        bgid = baselines.get(c0.baseline_group_key)
        bcells = groups[bgid] if bgid is not None else []
        mine, theirs = recs.get(gid, []), recs.get(bgid, []) if bgid is not None else []
        out[gid] = {"sampled": _sampled_test(gcells, mine, bcells, theirs, scores, bgid, c0.temperature, kw)}
        turns = sorted({r.turn for r in mine if r.turn is not None})
        if len(turns) >= 2:
            base_id, whole = split_group_id(gid)
            for t in turns:
                out[sliced_group_id(base_id, whole.model_copy(update={"turn": t}))] = {"sampled": _sampled_test(
                    gcells, [r for r in mine if r.turn == t], bcells, [r for r in theirs if r.turn == t], scores, bgid,
                    c0.temperature, kw)}
    return out


def _sampled_test(gcells: Sequence[Cell], mine: Sequence[RequestRecord], bcells: Sequence[Cell],
                  theirs: Sequence[RequestRecord], scores: tuple[dict[tuple, ScoreRow], dict[tuple, str], list[str]],
                  bgid: str | None, temperature: float, kw: dict[str, Any]) -> dict[str, Any]:
    """The sampled test of the method's requests ``mine`` against the baseline's ``theirs`` (its stored result)."""
    ok, err, engine_errors = scores
    u, n_scored, n_missing, errors = _group_pit(gcells, mine, ok, err)
    bu, b_scored = None, 0
    if bgid is not None:
        bu, b_scored, _, _ = _group_pit(bcells, theirs, ok, err)
        if bu.size == 0:
            bu = None
    v = distribution_verdict(u, bu, **kw)
    reason = v.reason
    if n_scored == 0:
        why = "; ".join(errors or engine_errors) or "no teacher-forced scores (equivalence.jsonl missing?)"
        reason = f"no scored samples: {why}"
    elif n_missing:
        reason += f"; {n_missing} request(s) not scored"
    if bgid is None:
        reason += "; no baseline group to compare with"
    return {
        "verdict": v.verdict,
        "reason": reason,
        "baseline_group": bgid,
        "temperature": temperature,
        "n_requests": n_scored,
        "n_unscored": n_missing,
        "n_tokens": v.n_tokens,
        "n_baseline_tokens": int(bu.size) if bu is not None else 0,
        "n_baseline_requests": b_scored,
        "statistic": _finite(v.method.statistic),
        "pvalue": _finite(v.pvalue),
        "ks_pvalue": _finite(v.method.ks_pvalue),
        "chi2_pvalue": _finite(v.method.chi2_pvalue),
        "two_sample_pvalue": _finite(v.two_sample.pvalue) if v.two_sample else None,
        "baseline_pvalue": _finite(v.baseline.pvalue) if v.baseline else None,
        "alpha": kw["alpha"],
        "detectable_tv": _finite(v.detectable_tv),
        "min_detectable_tv": _finite(v.detectable_tv),
        "target_tv": v.target_tv,
        "min_tokens": v.min_tokens,
        "scorer": SCORER,
    }


def equivalence_summaries(
    run_dir: Path,
    cells: Sequence[Cell],
    requests: Sequence[RequestRecord],
    torn: list[str] | None = None,
    *,
    engine_dtypes: Mapping[str, str | None] | None = None,
    spec: EquivalenceSpec | None = None,
) -> dict[str, Equivalence]:
    """Greedy and sampled results merged per group: ``{group_id: Equivalence(greedy=…, sampled=…)}``.

    ``spec`` is the suite's ``equivalence:`` section (tie tolerance override;
    the sampled test's alpha, power and target TV). Only groups with at least
    one test appear. Each test's dict carries ``verdict`` and ``reason`` (what
    :mod:`specbench.report.markdown` renders).
    """
    spec = spec or EquivalenceSpec()
    sampled_kw: dict[str, Any] = {}
    if spec.sampled is not None:
        sampled_kw = {"alpha": spec.sampled.alpha, "power": spec.sampled.power, "target_tv": spec.sampled.target_tv}
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for part in (
        greedy_equivalence(cells, requests, engine_dtypes=engine_dtypes, tie_tolerance=spec.tie_tolerance),
        sampled_equivalence(run_dir, cells, requests, torn=torn, **sampled_kw),
    ):
        for gid, d in part.items():
            out[gid].update(d)
    return {gid: Equivalence.model_validate(d) for gid, d in out.items()}


def run_equivalence(
    run_dir: Path,
    manifest: RunManifest,
    cells: Sequence[Cell],
    requests: Sequence[RequestRecord],
    torn: list[str] | None = None,
) -> dict[str, Equivalence]:
    """:func:`equivalence_summaries` of a stored run, as its manifest's suite asks for them (its
    ``equivalence:`` section) with the dtypes its engines computed in."""
    spec = manifest.suite.equivalence if manifest.suite is not None else EquivalenceSpec()
    return equivalence_summaries(run_dir, cells, requests, torn, engine_dtypes=manifest.engine_dtypes(), spec=spec)


def plan_lines(eq: EquivalenceSpec) -> list[str]:
    """What a suite's lossless checks (its ``equivalence:`` section) will do, in words (for --dry-run)."""
    lines = []
    if eq.greedy:
        if eq.tie_tolerance is not None:
            tol = f"{eq.tie_tolerance:g} nats (equivalence.tie_tolerance)"
        else:
            tol = "from each engine's dtype (" + ", ".join(f"{k} {v:g}" for k, v in TIE_TOLERANCE_BY_DTYPE.items()) + " nats)"
        lines.append(f"greedy: token identity vs the baseline, top-{eq.logprobs} logprobs; near-tie tolerance {tol}")
    s = eq.sampled
    if s is not None:
        need = min_tokens_for_tv(s.target_tv, s.alpha, s.power, n_tests=3)
        lines.append(f"sampled: T={s.temperature:g}, PIT vs the plain target (teacher forcing); alpha {s.alpha:g}, "
                     f"detects a per-token TV of {s.target_tv:g} with power {s.power:g} from >= {need} tokens per method")
    return lines
