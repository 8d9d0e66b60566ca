"""``chat_jsonl``: one conversation per line in the OpenAI ``messages`` format.

A line is ``{"messages": [{"role": …, "content": …}, …], "category": …, "id": …}``
(``category`` and ``id`` optional): optional system messages first, then user and
assistant messages alternating, starting with a user message. Any other line is
an error that names the file and line.

Three ways to send a conversation (the suite's ``turns`` and ``replay``):

- first turn (the default): the system messages and the first user message;
- ``turns: all`` (``replay: live``, the default with turns: all): every user turn, each
  after the model's own replies to the turns before it (the engine generates them);
- ``replay: recorded``: every recorded assistant turn is generated afresh, one request
  each, from the recorded history before it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from specbench.results.slices import Slice


class ChatFormatError(ValueError):
    """A chat_jsonl line is not a conversation; the message starts with ``file:line:``."""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRow(BaseModel):
    model_config = ConfigDict(extra="ignore")

    messages: list[ChatMessage]
    category: str | None = None
    id: str | int | None = None

    @field_validator("category")
    @classmethod
    def _category(cls, v: str | None) -> str | None:
        return None if v is None else Slice(category=v).category

    @model_validator(mode="after")
    def _alternating(self) -> ChatRow:
        roles = [m.role for m in self.messages]
        rest = roles[next((i for i, r in enumerate(roles) if r != "system"), len(roles)):]
        if not rest:
            raise ValueError("messages hold no user message")
        for i, role in enumerate(rest):
            want = "user" if i % 2 == 0 else "assistant"
            if role != want:
                raise ValueError(f"message {len(roles) - len(rest) + i}: expected a {want} message "
                                 f"(after the system messages, user and assistant alternate), got {role}")
        return self

    @property
    def system(self) -> list[dict[str, str]]:
        return [m.model_dump() for m in self.messages if m.role == "system"]

    @property
    def user_turns(self) -> list[str]:
        return [m.content for m in self.messages if m.role == "user"]

    @property
    def replies(self) -> list[str]:
        return [m.content for m in self.messages if m.role == "assistant"]


def read_chat_jsonl(path: Path) -> list[ChatRow]:
    """Every conversation of a chat_jsonl file (``.gz`` allowed); blank lines are skipped."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    rows: list[ChatRow] = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append(ChatRow.model_validate(json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ChatFormatError(f"{path}:{lineno}: not JSON: {exc.msg}") from None
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ChatFormatError(f"{path}:{lineno}: {where + ': ' if where else ''}{first['msg']}") from None
    return rows


def history_before(row: ChatRow, turn: int) -> list[dict[str, str]]:
    """The recorded messages a conversation's ``turn`` (1-based) answers: system, then turns up to its user message."""
    out = list(row.system)
    for i, user in enumerate(row.user_turns[:turn]):
        out.append({"role": "user", "content": user})
        if i + 1 < turn:
            out.append({"role": "assistant", "content": row.replies[i]})
    return out
