"""Conversations run turn by turn on one engine (``turns: all``; chat_jsonl ``replay: live``).

Every conversation's turn t+1 is sent with the chat history holding the engine's
**own** reply to turn t (as Spec-Bench, FastChat and AIPerf run MT-Bench): the
cell's conversations go to the engine one turn at a time, turn 1 of all of them,
then turn 2 of those that have one, and so on. Each turn is one request of the
engine's usual cell (its load applies: a server cell at concurrency N has at most
N conversations in flight, each with one turn), so offline, server and reference
engines run conversations without knowing they are.

The write unit is a conversation: its turns' records are emitted together once
its last turn finished (or errored: later turns are not sent), so a run stopped
mid-cell leaves no partial conversation on disk and ``--resume`` redoes each
unfinished one whole (:func:`specbench.analysis.metrics.complete_conversations`
drops an attempt torn between its appends).
"""

from __future__ import annotations

from specbench.engines.protocol import CellFailed, EmitRecord, Engine
from specbench.results.records import RequestRecord, SpecCounters
from specbench.results.requests import CellOutcome, CellRequest, PreparedPrompt


def is_conversations(request: CellRequest) -> bool:
    return any(p.later_turns is not None for p in request.prompts)


def turn_prompt_id(conversation_id: str, turn: int) -> str:
    """Turn 1 keeps the conversation's prompt id; later turns are ``<id>.turn<t>``."""
    return conversation_id if turn == 1 else f"{conversation_id}.turn{turn}"


def turn_messages(first: list[dict[str, str]], later_turns: list[str], replies: list[str]) -> list[dict[str, str]]:
    """The chat history turn ``len(replies) + 1`` is sent with: the first turn's messages, then each
    earlier reply of the engine and the next user turn."""
    out = list(first)
    for reply, user in zip(replies, later_turns, strict=False):
        out += [{"role": "assistant", "content": reply}, {"role": "user", "content": user}]
    return out


def _collect(into: dict[str, RequestRecord]) -> EmitRecord:
    def keep(r: RequestRecord) -> None:
        into[r.prompt_id] = r
    return keep


def run_conversations(engine: Engine, request: CellRequest, emit: EmitRecord) -> CellOutcome:
    """Run the request's conversations turn by turn; emit each conversation's records when it ends."""
    if request.sampling.samples_per_prompt != 1:
        raise CellFailed("conversations run one sample per prompt (samples_per_prompt: 1)")
    todo = [p for p in request.prompts if (p.prompt_id, 0) not in request.skip]
    if any(p.messages is None for p in todo):
        raise CellFailed("conversations need chat messages (a target with a chat template)")
    later = {p.prompt_id: list(p.later_turns or []) for p in todo}
    first = {p.prompt_id: list(p.messages or []) for p in todo}
    replies: dict[str, list[str]] = {p.prompt_id: [] for p in todo}
    ended: dict[str, list[RequestRecord]] = {p.prompt_id: [] for p in todo}
    current = [p.model_copy(update={"later_turns": None}) for p in todo]
    conv_of = {p.prompt_id: p.prompt_id for p in todo}
    counters: SpecCounters | None = None
    wall, n, turn = 0.0, 0, 1
    while current:
        got: dict[str, RequestRecord] = {}
        out = engine.run_cell(request.model_copy(update={"prompts": current, "skip": set()}), _collect(got))
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
            ended[cid].append(rec)
            if rec.error is None and turn < total:
                replies[cid].append(rec.output_text)
                nxt = p.model_copy(update={"prompt_id": turn_prompt_id(cid, turn + 1),
                                           "messages": turn_messages(first[cid], later[cid], replies[cid])})
                conv_of[nxt.prompt_id] = cid
                following.append(nxt)
            else:
                for r in ended.pop(cid):  # the conversation ended: its turns are written together
                    emit(r)
        current, turn = following, turn + 1
    return CellOutcome(counters=counters, wall_time_s=wall, num_requests=n)
