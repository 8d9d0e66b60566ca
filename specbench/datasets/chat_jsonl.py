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

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from specbench.config.dataset_kinds import CHAT_JSONL, DatasetKind
from specbench.config.suite import DatasetSpec
from specbench.datasets.base import DataCheck, DatasetError, KindModule, Row, RowError, select
from specbench.results.requests import PreparedPrompt
from specbench.results.slices import Slice


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


def history_before(row: ChatRow, turn: int) -> list[dict[str, str]]:
    """The recorded messages a conversation's ``turn`` (1-based) answers: system, then turns up to its user message."""
    out = list(row.system)
    for i, user in enumerate(row.user_turns[:turn]):
        out.append({"role": "user", "content": user})
        if i + 1 < turn:
            out.append({"role": "assistant", "content": row.replies[i]})
    return out


def conversation(row: Row) -> ChatRow:
    """A row as a conversation (a :class:`RowError` saying which message is wrong otherwise)."""
    try:
        return ChatRow.model_validate(row.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RowError(f"{where + ': ' if where else ''}{first['msg']}") from None


Conversation = tuple[str, ChatRow]  # (id, conversation)


class ChatJsonl(KindModule):
    kind: ClassVar[DatasetKind] = CHAT_JSONL

    def conversations(self, spec: DatasetSpec, rows: list[Row], bad: list[str] | None = None) -> list[Conversation]:
        """Every row as a conversation with its id; without ``bad`` the first bad row raises."""
        out = []
        for i, row in enumerate(rows):
            try:
                r = conversation(row)
            except RowError as exc:
                if bad is None:
                    raise DatasetError(f"{row.where}: {exc}") from None
                bad.append(f"{row.where}: {exc}")
                continue
            out.append((str(r.id) if r.id is not None else f"{spec.name}-{i}", r))
        return out

    def prompts(self, spec: DatasetSpec, base_dir: Path, chat: bool) -> list[PreparedPrompt]:
        if not chat:
            raise DatasetError(f"{spec.name}: a chat_jsonl dataset needs a target with a chat template")
        return self.build(spec, self.conversations(spec, self.rows(spec, base_dir)))

    def check_prompts(self, spec: DatasetSpec, rows: list[Row], out: DataCheck) -> int:
        built = len(self.build(spec, self.conversations(spec, rows, out.problems)))
        if not built and not out.problems:
            out.add(f"dataset {spec.name!r} yields no prompts")
        return built

    def build(self, spec: DatasetSpec, convs: list[Conversation]) -> list[PreparedPrompt]:
        """The prompts of the conversations a run uses, sent as the suite's ``turns``/``replay`` say."""
        out: list[PreparedPrompt] = []
        for cid, r in select(spec, convs, lambda c: c[1].category):
            meta = {"category": r.category} if r.category else {}
            if spec.replay == "recorded":
                out += [PreparedPrompt(prompt_id=f"{cid}.turn{t}", messages=history_before(r, t), meta=meta, turn=t,
                                       max_tokens=None, reference=reply)
                        for t, reply in enumerate(r.replies, 1)]
            elif spec.turns == "all" or spec.replay == "live":
                out.append(PreparedPrompt(prompt_id=cid, messages=history_before(r, 1), meta=meta,
                                          later_turns=r.user_turns[1:]))
            else:
                out.append(PreparedPrompt(prompt_id=cid, messages=history_before(r, 1), meta=meta))
        return out


MODULE = ChatJsonl()
