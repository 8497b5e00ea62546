"""Session events into memory (the synchronous path): user and model text only.

Partial events, events without text (control events: state or artifact changes only),
empty text, text that looks like it carries a credential and turns that carry no fact
(``memory.fillers``) are skipped. A turn whose text the scope holds already is a duplicate;
one that nearly repeats a memory is merged into it (skipped, reason ``near_duplicate``:
``memory.dedup``). Each stored event
has a deterministic idempotency key, ``session:<session_id>:<event_id>``, or without a
session ``event:<event_id>`` (an event id within the user's scope), so repeating the same
call adds nothing and reports duplicates.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ctxadmin.errors import ServiceError, invalid
from ctxadmin.models import App
from ctxadmin.pruning import looks_like_secret
from memory import entries
from memory.fillers import carries_no_fact
from memory.inputs import MAX_INGEST_EVENTS, NewMemory
from sessions_app.selectors import EventError, EventLimits, validate_event


@dataclass(frozen=True)
class IngestResult:
    added: int
    duplicates: int
    skipped: int
    skipped_by_reason: dict[str, int]
    memory_ids: list[str]


def event_text(event: dict) -> str:
    """An event's text parts, joined by newlines and stripped."""
    content = event.get("content") or {}
    return "\n".join(part["text"] for part in content.get("parts", []) if "text" in part).strip()


def unfit_reason(event: dict) -> str | None:
    """Why an event holds no memory whatever its text says (``partial``, ``no_event_id``,
    ``control``: no text part, ``empty``), or None."""
    if event.get("partial"):
        return "partial"
    if not event.get("event_id"):
        return "no_event_id"
    content = event.get("content")
    if not content or not any("text" in part for part in content.get("parts", [])):
        return "control"
    if not event_text(event):
        return "empty"
    return None


def skip_reason(event: dict) -> str | None:
    """Why an event is not memory, or None when it is: ``unfit_reason``, ``secret`` for
    text that looks like it carries a credential, ``no_fact`` for filler."""
    reason = unfit_reason(event)
    if reason is None and looks_like_secret(event_text(event)):
        return "secret"
    if reason is None and carries_no_fact(event_text(event)):
        return "no_fact"
    return reason


# The metadata keys every entry from an event carries, which custom metadata cannot set.
EVENT_METADATA_KEYS = frozenset({"role", "source"})


def event_key(session_id: str | None, event_id: str) -> str:
    """The idempotency key of the entry made from an event."""
    if session_id is None:
        return f"event:{event_id}"
    return f"session:{session_id}:{event_id}"


def add_events(
    app: App,
    user_id: str,
    session_id: str | None,
    raw_events: list,
    custom_metadata: dict | None = None,
) -> IngestResult:
    """The events' text as memories of the scope, with ``session_id`` as their provenance
    (None: none) and ``custom_metadata`` (already parsed) beside their ``role`` and
    ``source``."""
    if not isinstance(raw_events, list) or not 1 <= len(raw_events) <= MAX_INGEST_EVENTS:
        raise invalid("events", f"must be a list of 1 to {MAX_INGEST_EVENTS} events")
    events = []
    for index, raw in enumerate(raw_events):
        try:
            events.append(validate_event(raw, f"events[{index}]", EventLimits()))
        except EventError as exc:
            raise invalid(exc.path, exc.message) from None
    reasons: Counter[str] = Counter()
    added = duplicates = 0
    ids: list[str] = []
    for event in events:
        reason = skip_reason(event)
        if reason is not None:
            reasons[reason] += 1
            continue
        role = (event["content"] or {}).get("role", "")
        new = NewMemory(
            content=event_text(event),
            metadata={**(custom_metadata or {}), "role": role, "source": "session"},
            idempotency_key=event_key(session_id, event["event_id"]),
            session_id=session_id or "",
            event_id=event["event_id"],
            author=event["author"],
            source_timestamp=event.get("timestamp"),
            embed="auto",
        )
        try:
            entry, outcome = entries.merge_memory(app, user_id, new)
        except ServiceError as exc:
            if exc.code == "idempotency_conflict":
                reasons["changed_since_ingested"] += 1
                continue
            raise
        if outcome == entries.NEAR:
            reasons["near_duplicate"] += 1
            continue
        ids.append(entry["id"])
        if outcome == entries.CREATED:
            added += 1
        else:
            duplicates += 1
    return IngestResult(added, duplicates, sum(reasons.values()), dict(reasons), ids)
