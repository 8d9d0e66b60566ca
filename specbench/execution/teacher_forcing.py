"""Teacher forcing, the engine half of the sampled equivalence test (its verdicts, and greedy
identity, are computed from the records by :mod:`specbench.analysis.equivalence`).

Sampled (temperature > 0): every generated token of every speculative
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
probability, ties by token id), so :func:`~specbench.analysis.equivalence.sampled_equivalence` rebuilds
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.analysis.equivalence import BASELINE_KIND, ORDER, SCORER, latest_scores
from specbench.analysis.metrics import complete_conversations
from specbench.config.plan import Cell, Plan
from specbench.engines.factory import ResolvedEngine, resolve_engine
from specbench.results import rundir
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

__all__ = ["EQUIVALENCE", "ORDER", "SCORER", "SCORE_BATCH", "score_items_for", "score_rows", "teacher_forcing_engine",
           "teacher_forcing_work"]

#: Requests per teacher-forcing batch sent to the engine.
SCORE_BATCH = 16


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
    done, _, _ = latest_scores(rundir.read_equivalence_rows(run_dir))
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
