"""Slices of a group: the optional dimensions below (target, method, dataset, T, load).

Categories, conversation turns, input lengths and measurement rounds split a
group into slices (issues 22, 24, 25). Every one of them is addressed the same
way, by the :class:`Slice` a :class:`~specbench.results.summary.GroupSummary`
carries, and written into its id as a last path segment of ``key=value`` pairs
in :data:`SLICE_KEYS` order::

    tiny/eagle3/spec_bench/T0/b1                        the whole group (no slice: id unchanged)
    tiny/eagle3/spec_bench/T0/b1/category=coding        one category
    tiny/eagle3/spec_bench/T0/b1/category=coding,turn=2 one category's second turns

A gate rule, the history database and ``specbench.load()`` frames all use that
id; :func:`group_matches` matches a rule's glob against it, so existing globs
(``*/ngram/*``) match a group and all its slices, and a pattern whose last
segment is a selector (``*/eagle3/*/category=cod*``) picks slices by key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fnmatch import fnmatchcase

from pydantic import BaseModel, ConfigDict, Field, field_validator

_VALUE = re.compile(r"^[A-Za-z0-9_.+-]+$")


class Slice(BaseModel):
    """Which part of a group a summary covers; every key None: the whole group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: str | None = Field(None, description="the prompt's category (Spec-Bench's 13, GSM8k: math, …)")
    turn: int | None = Field(None, ge=1, description="conversation turn, 1-based")
    input_tokens: int | None = Field(None, ge=1, description="requested prompt length in target tokens")
    round: int | None = Field(None, ge=0, description="measurement round of an interleaved speed cell, 0-based")

    @field_validator("category")
    @classmethod
    def _plain(cls, v: str | None) -> str | None:
        if v is not None and not _VALUE.match(v):
            raise ValueError(f"category {v!r}: use letters, digits and _ . + - only (it is part of a group id)")
        return v

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in SLICE_KEYS)

    def items(self) -> list[tuple[str, str]]:
        """``(key, value as text)`` of the keys set, in :data:`SLICE_KEYS` order."""
        return [(k, str(v)) for k in SLICE_KEYS if (v := getattr(self, k)) is not None]

    @property
    def id(self) -> str:
        """``category=coding,turn=2``; ``""`` for the whole group."""
        return ",".join(f"{k}={v}" for k, v in self.items())


#: The slice keys, in the order a slice id writes them.
SLICE_KEYS: tuple[str, ...] = tuple(Slice.model_fields)


class SliceError(ValueError):
    pass


def parse_slice(text: str) -> Slice:
    """A :class:`Slice` from its id (``category=coding,turn=2``; ``""``: the whole group)."""
    if not text:
        return Slice()
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key not in SLICE_KEYS or key in fields:
            raise SliceError(f"slice {text!r}: {part!r} is not one of {', '.join(k + '=…' for k in SLICE_KEYS)}")
        fields[key] = value
    try:
        return Slice.model_validate(fields)
    except ValueError as exc:
        raise SliceError(f"slice {text!r}: {exc}") from None


def sliced_group_id(group_id: str, s: Slice | None) -> str:
    """The id of a group's slice: the group id itself when there is no slice."""
    return group_id if s is None or s.empty else f"{group_id}/{s.id}"


def split_group_id(group_id: str) -> tuple[str, Slice]:
    """``(group id without slice, slice)``: a last segment with ``=`` is the slice."""
    head, _, last = group_id.rpartition("/")
    if head and "=" in last:
        return head, parse_slice(last)
    return group_id, Slice()


def parse_selector(text: str) -> dict[str, str]:
    """A rule's slice selector ``category=cod*,turn=2`` as ``{key: glob}`` (keys checked)."""
    out: dict[str, str] = {}
    for part in text.split(","):
        key, sep, glob = part.partition("=")
        if not sep or key not in SLICE_KEYS:
            raise SliceError(f"slice selector {text!r}: {part!r} is not one of "
                             f"{', '.join(k + '=<glob>' for k in SLICE_KEYS)}")
        out[key] = glob
    return out


def selector_matches(selector: Mapping[str, str], s: Slice) -> bool:
    """Every key of the selector is set on the slice and its value matches the glob."""
    values = dict(s.items())
    return all(k in values and fnmatchcase(values[k], glob) for k, glob in selector.items())


def group_matches(pattern: str, group_id: str) -> bool:
    """A rule's group pattern against a (sliced) group id.

    A plain glob matches the whole id, as rules always have (``*`` spans ``/``,
    so ``*/ngram/*`` matches a group and its slices). A pattern whose last
    segment holds ``=`` is ``<group glob>/<slice selector>``: the group glob
    matches the id without its slice and the selector its slice keys.
    """
    head, _, last = pattern.rpartition("/")
    if not (head and "=" in last):
        return fnmatchcase(group_id, pattern)
    base, s = split_group_id(group_id)
    return fnmatchcase(base, head) and selector_matches(parse_selector(last), s)
