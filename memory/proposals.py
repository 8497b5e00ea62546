"""What an extractor may propose for a user's memory, and the check that decides whether any
of it is applied. Pure: no Django, no database.

An extractor (a model, or the rule-based one) is shown the new turns, by event id, and the
scope's candidate memories numbered 1..N by the server (never their ids), and answers
``{"operations": [...]}``, each operation one of:

- ``{"op": "add", "content", "key"?, "reason", "source_event_ids"}``: a new memory (with a
  ``key``, a version of that fact);
- ``{"op": "update", "candidate", "content", "key"?, "reason", "source_event_ids"}``: a new
  version superseding the candidate (a keyed candidate keeps its key: another key is a
  retire and an add; an unkeyed one may gain a key);
- ``{"op": "retire", "candidate", "reason", "source_event_ids"}``: the candidate stops being
  valid now (its validity closed, never deleted);
- ``{"op": "noop", "reason"}``: nothing to change.

The whole answer is checked before anything is applied, and one fault refuses all of it
(``ProposalError``: a code and the path of the fault, never the offending text): an object
of exactly ``operations``, at most ``MAX_OPERATIONS``; each operation's own fields and no
others; content non-empty, without NUL, within the content limit, without anything that
looks like a credential; a key of the fact-key grammar; a candidate number shown; a reason of
1..``MAX_REASON_CHARS`` characters; 1..``MAX_SOURCES`` source event ids, each one of the
turns shown. Across the batch: a candidate is the subject of one operation at most, a key is
written by one operation at most, and an update keeps a keyed candidate's key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxadmin.errors import ServiceError
from memory.facts import parse_fact_key

MAX_OPERATIONS = 32
MAX_REASON_CHARS = 300
MAX_SOURCES = 20

_FIELDS = {
    "add": ({"op", "content", "reason", "source_event_ids"}, {"key"}),
    "update": ({"op", "candidate", "content", "reason", "source_event_ids"}, {"key"}),
    "retire": ({"op", "candidate", "reason", "source_event_ids"}, set()),
    "noop": ({"op", "reason"}, set()),
}


class ProposalError(Exception):
    """An answer that is refused whole: ``code`` says what was wrong, ``path`` where."""

    def __init__(self, code: str, path: str):
        super().__init__(f"{code} at {path}")
        self.code = code
        self.path = path


@dataclass(frozen=True)
class Candidate:
    """A memory the extractor is shown, under its number."""

    number: int
    memory_id: str
    content: str
    key: str | None


@dataclass(frozen=True)
class Operation:
    op: str
    reason: str
    content: str | None = None
    key: str | None = None
    candidate: Candidate | None = None
    source_event_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Limits:
    max_content_bytes: int
    looks_like_secret: Callable[[str], bool]


def _text(value: Any, path: str, most_bytes: int, limits: Limits) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ProposalError("content_invalid", path)
    if "\x00" in value or len(value.encode("utf-8")) > most_bytes:
        raise ProposalError("content_invalid", path)
    if limits.looks_like_secret(value):
        raise ProposalError("content_sensitive", path)
    return value.strip()


def _operation(
    raw: Any, path: str, candidates: Mapping[int, Candidate], events: frozenset[str], limits
) -> Operation:
    if not isinstance(raw, dict) or raw.get("op") not in _FIELDS:
        raise ProposalError("operation_invalid", path)
    required, optional = _FIELDS[raw["op"]]
    if not required <= set(raw) <= required | optional:
        raise ProposalError("operation_fields", path)
    reason = raw["reason"]
    if not isinstance(reason, str) or not 1 <= len(reason.strip()) <= MAX_REASON_CHARS:
        raise ProposalError("reason_invalid", f"{path}.reason")
    if limits.looks_like_secret(reason):
        raise ProposalError("content_sensitive", f"{path}.reason")
    if raw["op"] == "noop":
        return Operation("noop", reason.strip())
    sources = raw["source_event_ids"]
    if (
        not isinstance(sources, list)
        or not 1 <= len(sources) <= MAX_SOURCES
        or not all(isinstance(s, str) and s in events for s in sources)
    ):
        raise ProposalError("sources_invalid", f"{path}.source_event_ids")
    candidate = None
    if "candidate" in raw:
        number = raw["candidate"]
        if isinstance(number, bool) or not isinstance(number, int) or number not in candidates:
            raise ProposalError("candidate_unknown", f"{path}.candidate")
        candidate = candidates[number]
    content = key = None
    if "content" in raw:
        content = _text(raw["content"], f"{path}.content", limits.max_content_bytes, limits)
    if raw.get("key") is not None:
        try:
            key = parse_fact_key(raw["key"], f"{path}.key")
        except ServiceError:
            raise ProposalError("key_invalid", f"{path}.key") from None
    if raw["op"] == "update" and candidate.key is not None:
        if key not in (None, candidate.key):
            raise ProposalError("key_changed", f"{path}.key")
        key = candidate.key
    return Operation(
        raw["op"], reason.strip(), content, key, candidate, tuple(dict.fromkeys(sources))
    )


def check(answer: Any, candidates: list[Candidate], event_ids, limits: Limits) -> list[Operation]:
    """The answer's operations, or ``ProposalError`` for the first fault (see the module)."""
    if not isinstance(answer, dict) or set(answer) != {"operations"}:
        raise ProposalError("answer_invalid", "$")
    raw_operations = answer["operations"]
    if not isinstance(raw_operations, list) or len(raw_operations) > MAX_OPERATIONS:
        raise ProposalError("operations_invalid", "operations")
    shown = {candidate.number: candidate for candidate in candidates}
    events = frozenset(event_ids)
    operations = []
    subjects: set[int] = set()
    keys: set[str] = set()
    for index, raw in enumerate(raw_operations):
        path = f"operations[{index}]"
        operation = _operation(raw, path, shown, events, limits)
        if operation.candidate is not None:
            if operation.candidate.number in subjects:
                raise ProposalError("candidate_twice", f"{path}.candidate")
            subjects.add(operation.candidate.number)
        if operation.op in ("add", "update") and operation.key is not None:
            if operation.key in keys:
                raise ProposalError("key_twice", f"{path}.key")
            keys.add(operation.key)
        operations.append(operation)
    return operations
