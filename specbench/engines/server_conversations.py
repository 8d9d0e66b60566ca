"""A server cell's conversations as load (``turns: all``; chat_jsonl ``replay: live``).

The load generator sends each conversation's first turn as a request and, once a
turn's reply arrived, its next turn at once on the same stream
(:func:`specbench.engines.loadgen.run_load` with ``follow_up``), so a cell at
concurrency N has N conversations in flight. This module is the conversations'
side of that: the first turns, the next turn built from the history holding the
server's own reply, and the conversation and turn of each request for its record.
"""

from __future__ import annotations

from collections.abc import Callable

from specbench.engines.protocol import CellFailed
from specbench.engines.stream_client import RequestItem, RequestResult
from specbench.results.records import RequestRecord
from specbench.results.requests import (
    CellRequest,
    PreparedPrompt,
    conversations_problem,
    turn_messages,
    turn_prompt_id,
)


class ConversationLoad:
    """The conversations of one cell request; ``build`` makes a prompt's request (its seed, sampling, model)."""

    def __init__(self, request: CellRequest, build: Callable[[PreparedPrompt], RequestItem]) -> None:
        self.build = build
        self.first = {p.prompt_id: p for p in request.prompts if (p.prompt_id, 0) not in request.skip}
        problem = conversations_problem(request.sampling, list(self.first.values()))
        if problem is not None:
            raise CellFailed(problem)
        self.replies: dict[str, list[str]] = {cid: [] for cid in self.first}
        # request prompt id → (conversation id, turn, the conversation's turns)
        self.turn_of = {cid: (cid, 1, 1 + len(p.later_turns or [])) for cid, p in self.first.items()}

    def items(self) -> list[RequestItem]:
        """Every conversation's first turn."""
        return [self.build(p.model_copy(update={"later_turns": None})) for p in self.first.values()]

    def follow_up(self, res: RequestResult) -> RequestItem | None:
        """The conversation's next turn after ``res``, its history holding ``res``'s reply; None once it ended
        (its last turn, or an error: later turns are not sent)."""
        cid, turn, total = self.turn_of[res.item.prompt_id]
        if not res.ok or turn >= total:
            return None
        first = self.first[cid]
        self.replies[cid].append(res.text)
        nxt = first.model_copy(update={
            "prompt_id": turn_prompt_id(cid, turn + 1), "later_turns": None,
            "messages": turn_messages(list(first.messages or []), list(first.later_turns or []), self.replies[cid]),
        })
        self.turn_of[nxt.prompt_id] = (cid, turn + 1, total)
        return self.build(nxt)

    def annotate(self, rec: RequestRecord) -> RequestRecord:
        """The record with its conversation, turn and the conversation's number of turns."""
        cid, turn, total = self.turn_of[rec.prompt_id]
        return rec.model_copy(update={"conversation_id": cid, "turn": turn, "conversation_turns": total})
