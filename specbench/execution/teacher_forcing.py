"""Equivalence checks on real runs: glue between records, engines and the pure
statistics of :mod:`specbench.analysis.lossless`.

* Greedy (temperature 0): each speculative group's outputs are paired with
  the baseline group's (same target, dataset, temperature and load; paired
  by prompt, sample and repeat) and compared token by token, with the
  baseline's recorded top-k logprobs telling near-ties from real divergences
  (:func:`greedy_equivalence`).
* Sampled (temperature > 0): every generated token of every speculative
  *and* baseline sequence is scored under the target *without* speculation
  by teacher forcing — one prefill of prompt + generated tokens through a
  plain vLLM engine of the same target with full-vocabulary prompt logprobs
  (a teacher-forcing job, :mod:`specbench.execution.worker`). vLLM's prompt logprobs are the *raw*
  log-softmax of the logits (``logprobs_mode`` only switches between logits
  and logprobs; no temperature or top-p is applied to prompt logprobs), so
  the cell's temperature and top-p are applied here, exactly as vLLM's
  sampler does (logits / T, then nucleus by descending probability), with
  the whole vocabulary — no tail bucket. Per token the derived file
  ``equivalence.jsonl`` keeps ``F(x-)`` and ``p(x)`` of the processed
  distribution in the pure module's canonical order (descending
  probability, ties by token id), so :func:`sampled_equivalence` rebuilds
  the randomized PIT values with a seeded rng and no engine.

``equivalence.jsonl`` rows: ``{"cell_id", "prompt_id", "sample_index",
"repeat", "temperature", "top_p", "order", "scorer", "f_minus": [...],
"p": [...]}`` for a scored request, or the same keys with ``"error"`` (and
no ``f_minus``/``p``) for one that could not be scored; an engine that
could not start writes ``{"target", "error"}``. It is derived data: delete
it and ``specbench run --resume`` the run to rebuild it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specbench.analysis.lossless import (
    canonical_dtype,
    compare_greedy,
    distribution_verdict,
    summarize_greedy,
    tie_tolerance_for,
)
from specbench.analysis.metrics import complete_conversations, pair_turns
from specbench.analysis.pit import pit_from_row
from specbench.config.plan import Cell, Plan
from specbench.config.suite import EquivalenceSpec
from specbench.engines.factory import ResolvedEngine, resolve_engine
from specbench.results import rundir
from specbench.results.parts import Equivalence
from specbench.results.records import RequestRecord
from specbench.results.requests import (
    PreparedPrompt,
    ScoreItem,
    ScoreKey,
    ScoreResult,
    ScoreRow,
    turn_messages,
)
from specbench.results.rundir import EQUIVALENCE
from specbench.results.slices import sliced_group_id, split_group_id

SCORER = "vllm prompt_logprobs=-1 (full vocabulary, raw), temperature/top-p applied by specbench"
ORDER = "probability"
BASELINE_KIND = "baseline"
#: Requests per teacher-forcing batch sent to the engine.
SCORE_BATCH = 16


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
    it; :func:`~specbench.analysis.lossless.tie_tolerance_for`).
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


def read_scores(run_dir: Path, torn: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of ``equivalence.jsonl`` (a torn last line of a killed run is skipped, said in ``torn``)."""
    return list(rundir.iter_jsonl(Path(run_dir) / EQUIVALENCE, torn))


def _score_key(row: dict[str, Any]) -> tuple[str, str, int]:
    return (str(row["cell_id"]), str(row["prompt_id"]), int(row.get("sample_index", 0)))


def _latest_scores(rows: Iterable[dict[str, Any]]) -> tuple[dict[tuple, dict], dict[tuple, str], list[str]]:
    """Scored rows by request key (a success wins over errors), errors, engine errors."""
    ok: dict[tuple, dict] = {}
    err: dict[tuple, str] = {}
    engine_errors: list[str] = []
    for row in rows:
        if "cell_id" not in row:
            if row.get("error"):
                engine_errors.append(f"{row.get('target')}: {row['error']}")
            continue
        key = _score_key(row)
        if "f_minus" in row and not row.get("error"):
            ok[key] = row
            err.pop(key, None)
        elif key not in ok:
            err[key] = str(row.get("error"))
    return ok, err, engine_errors


def _group_pit(
    gcells: Sequence[Cell], recs: Sequence[RequestRecord], ok: dict[tuple, dict], err: dict[tuple, str]
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

    Needs ``equivalence.jsonl`` (from :func:`teacher_force_run`). The
    method's PIT values are tested for uniformity and against the baseline
    group's own scored samples (:func:`~specbench.analysis.lossless.distribution_verdict`).
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
    scores = _latest_scores(read_scores(run_dir, torn))
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
                  theirs: Sequence[RequestRecord], scores: tuple[dict[tuple, dict], dict[tuple, str], list[str]],
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


# ---------------------------------------------------------------------------
# teacher forcing (needs an engine)


def _baseline_config(plan: Plan, target_name: str) -> Any:
    """The plan's baseline engine config for a target, or one built from its target."""
    from specbench.config.plan import EngineConfig
    from specbench.config.suite import MethodSpec

    cfgs = [e for e in plan.engines if e.target.name == target_name]
    for e in cfgs:
        if e.method.method == BASELINE_KIND:
            return e
    t = cfgs[0].target
    return EngineConfig(
        key=f"{t.name}--teacher-forcing",
        target=t,
        method=MethodSpec(method=BASELINE_KIND, name="teacher-forcing"),
        vllm_method=None,
        speculative_config=None,
    )


def score_items_for(
    records: Sequence[RequestRecord],
    cells: dict[str, Cell],
    prompts: Mapping[tuple[str, str], PreparedPrompt],
    top_p: float,
    replies: Mapping[tuple[str, str, int, int, int], str] | None = None,
) -> list[ScoreItem]:
    """The engine's ``score`` payloads for records (prompt text/messages + generated ids).

    A conversation's later turn is scored on the history it was sent with: its first turn's
    messages and the same cell's earlier replies (``replies``: (cell, conversation, sample,
    repeat, turn) → output text)."""
    items = []
    for r in records:
        c = cells[r.cell_id]
        p = prompts.get((c.dataset, r.conversation_id or r.prompt_id))
        text, messages = (p.text, p.messages) if p is not None else (None, None)
        if r.conversation_id is not None and (r.turn or 1) > 1:
            earlier = [(replies or {}).get((r.cell_id, r.conversation_id, r.sample_index, r.repeat, t), "")
                       for t in range(1, r.turn or 1)]
            messages = turn_messages(messages or [], (p.later_turns if p is not None else None) or [], earlier)
        items.append(ScoreItem(
            key=ScoreKey(cell_id=r.cell_id, prompt_id=r.prompt_id, sample_index=r.sample_index, repeat=r.repeat,
                         temperature=c.temperature, top_p=top_p),
            text=text,
            messages=messages,
            prompt_tokens=r.prompt_tokens,
            output_token_ids=r.output_token_ids,
            temperature=c.temperature,
            top_p=top_p,
        ))
    return items


def score_rows(items: Sequence[ScoreItem], results: Sequence[ScoreResult]) -> list[ScoreRow]:
    """``equivalence.jsonl`` rows from score payloads and the engine's results."""
    rows = []
    for it, res in zip(items, results, strict=False):
        row = ScoreRow(**it.key.model_dump(), order=ORDER, scorer=SCORER)
        if res.error:
            row.error = res.error
        else:
            row.f_minus = res.f_minus
            row.p = res.p
        rows.append(row)
    return rows


def teacher_forcing_work(run_dir: Path, plan: Plan) -> dict[str, list[ScoreItem]]:
    """Per target, the score payloads of every not-yet-scored T>0 record of the run.

    Raises what reading the records raises (the driver records it as an error row).
    """
    run_dir = Path(run_dir)
    cells = {c.cell_id: c for c in plan.cells}
    top_p = plan.decisions().top_p
    done, _, _ = _latest_scores(read_scores(run_dir))
    records = complete_conversations(rundir.read_requests(run_dir))
    prompts = {(p.dataset, p.prompt_id): p for p in rundir.read_prompts(run_dir)}
    todo: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        c = cells.get(r.cell_id)
        if c is None or c.temperature <= 0 or r.error is not None or not r.output_token_ids:
            continue
        if (r.cell_id, r.prompt_id, r.sample_index) in done:
            continue
        todo[c.target].append(r)
    replies = {(r.cell_id, r.conversation_id, r.sample_index, r.repeat, r.turn): r.output_text
               for r in complete_conversations(records) if r.conversation_id is not None and r.turn is not None}
    return {target: score_items_for(recs, cells, prompts, top_p, replies) for target, recs in todo.items()}


def teacher_forcing_engine(plan: Plan, target: str, platform: str) -> ResolvedEngine:
    """The target's plain engine with full-vocabulary prompt logprobs (its baseline config when the plan has one)."""
    res = resolve_engine(_baseline_config(plan, target), platform)
    kwargs = dict(res.engine_kwargs)
    kwargs["max_logprobs"] = -1
    kwargs.pop("speculative_config", None)
    kwargs.pop("per_request_spec_decode_metrics", None)
    cfg = res.config.model_copy(update={"key": f"{target}--teacher-forcing"})
    return res.model_copy(update={"config": cfg, "engine_kwargs": kwargs})
