"""Conversations run turn by turn on one engine (``turns: all``; chat_jsonl ``replay: live``).

Every conversation's turn t+1 is sent with the chat history holding the engine's
**own** reply to turn t (as Spec-Bench, FastChat and AIPerf run MT-Bench). How the
turns reach the engine depends on what it can do:

* an engine with ``capabilities.multi_turn`` (the vLLM server) runs the conversations
  itself, each as a unit of its load: at concurrency N, N conversations are in flight,
  each sending its next turn as soon as its previous one finished, and a new
  conversation starts only when one has ended (concurrency counts conversations, as in
  AIPerf; a Poisson cell's arrivals are conversations);
* any other engine (offline, reference) gets the cell's conversations one turn at a
  time: turn 1 of all of them as one cell request, then turn 2 of those that have one,
  and so on (its batch size applies to each of those requests).

The write unit is a conversation: its turns' records are emitted together once its
last turn finished (or errored: later turns are not sent) (:class:`WholeConversations`),
so a run stopped mid-cell leaves no partial conversation on disk and ``--resume`` redoes
each unfinished one whole (:func:`specbench.analysis.metrics.complete_conversations`
drops an attempt torn between its appends).
"""

from __future__ import annotations

from collections import defaultdict

from specbench.engines.protocol import CellFailed, EmitRecord, Engine
from specbench.results.records import RequestRecord, SpecCounters
from specbench.results.requests import (
    CellOutcome,
    CellRequest,
    PreparedPrompt,
    conversations_problem,
    turn_messages,
    turn_prompt_id,
)


class WholeConversations:
    """An emit that holds each conversation's turn records and passes them on together once its last
    turn ended (``turn == conversation_turns``) or errored; a record outside a conversation passes at once.
    Records of a conversation that never ended (its cell stopped or failed first) are never passed on."""

    def __init__(self, emit: EmitRecord) -> None:
        self.emit = emit
        self.held: dict[str, list[RequestRecord]] = defaultdict(list)

    def __call__(self, rec: RequestRecord) -> None:
        if rec.conversation_id is None:
            self.emit(rec)
            return
        self.held[rec.conversation_id].append(rec)
        if rec.error is not None or (rec.turn or 1) >= (rec.conversation_turns or 1):
            for r in self.held.pop(rec.conversation_id):
                self.emit(r)


def run_conversations(engine: Engine, request: CellRequest, emit: EmitRecord) -> CellOutcome:
    """Run the request's conversations turn by turn; emit each conversation's records when it ends."""
    todo = [p for p in request.prompts if (p.prompt_id, 0) not in request.skip]
    problem = conversations_problem(request.sampling, todo)
    if problem is not None:
        raise CellFailed(problem)
    request = request.model_copy(update={"prompts": todo, "skip": set()})
    write = WholeConversations(emit)
    if engine.capabilities.multi_turn:
        return engine.run_cell(request, write)
    return _turn_at_a_time(engine, request, write)


def _collect(into: dict[str, RequestRecord]) -> EmitRecord:
    def keep(r: RequestRecord) -> None:
        into[r.prompt_id] = r
    return keep


def _turn_at_a_time(engine: Engine, request: CellRequest, write: WholeConversations) -> CellOutcome:
    """Turn t of every conversation that reached it as one cell request, for t = 1, 2, …"""
    later = {p.prompt_id: list(p.later_turns or []) for p in request.prompts}
    first = {p.prompt_id: list(p.messages or []) for p in request.prompts}
    replies: dict[str, list[str]] = {p.prompt_id: [] for p in request.prompts}
    current = [p.model_copy(update={"later_turns": None}) for p in request.prompts]
    conv_of = {p.prompt_id: p.prompt_id for p in request.prompts}
    counters: SpecCounters | None = None
    wall, n, turn = 0.0, 0, 1
    while current:
        got: dict[str, RequestRecord] = {}
        out = engine.run_cell(request.model_copy(update={"prompts": current}), _collect(got))
        if out.counters is not None:
            counters = out.counters if counters is None else counters + out.counters
        wall += out.wall_time_s
        n += out.num_requests
        following: list[PreparedPrompt] = []
        for p in current:
            cid = conv_of[p.prompt_id]
            rec = got.get(p.prompt_id)
            if rec is None:
                raise CellFailed(f"the engine returned no record for turn {turn} of conversation {cid}")
            total = 1 + len(later[cid])
            rec = rec.model_copy(update={"conversation_id": cid, "turn": turn, "conversation_turns": total})
            write(rec)
            if rec.error is None and turn < total:
                replies[cid].append(rec.output_text)
                nxt = p.model_copy(update={"prompt_id": turn_prompt_id(cid, turn + 1),
                                           "messages": turn_messages(first[cid], later[cid], replies[cid])})
                conv_of[nxt.prompt_id] = cid
                following.append(nxt)
        current, turn = following, turn + 1
    return CellOutcome(counters=counters, wall_time_s=wall, num_requests=n)
