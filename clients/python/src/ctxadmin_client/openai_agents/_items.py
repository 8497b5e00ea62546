"""The OpenAI Agents SDK's session items to and from ctxadmin events (pure: no I/O).

One item is one event. The item itself travels verbatim in the event's ``output`` (an ADK
``Event`` field ctxadmin keeps as given, as free JSON), so ``get_items`` answers exactly the
items ``add_items`` took. Beside it, the event's ``content`` says the same in ADK's terms
where it can, so that a context ctxadmin builds from the session reads as a conversation:

- a user, system or developer message: role ``user``, its text parts;
- an assistant message: role ``model``, its ``output_text`` and ``refusal`` parts as text;
- a ``function_call``: role ``model``, a ``function_call`` part (``id`` the call id, ``args``
  the parsed arguments, or ``{"arguments": text}`` when they are not a JSON object);
- a ``function_call_output``: role ``user``, a ``function_response`` part
  (``response: {"output": ...}``) named after its call;
- anything else (reasoning, hosted tool calls, compaction items, ...): no content.

``pop_item`` appends an ADK rewind event (``actions.rewind_before_invocation_id``) naming the
popped item's invocation (each item has an invocation of its own), as ADK rewinds: nothing is
deleted, and the built context leaves the popped item out. Reads fold the rewinds here.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: The ``custom_metadata`` key marking the events this adapter writes; its value says what
#: the event is.
MARK = "openai_agents"
ITEM = "item"
POP = "pop"

#: The author of the events that are not messages of the user.
ASSISTANT = "assistant"

# ctxadmin's own checks of a function part's id and name (sessions_app/events.py): an item
# whose ids do not fit keeps no function part (the item itself is kept all the same).
_CALL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")
_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,255}\Z")


def new_id() -> str:
    return uuid.uuid4().hex


def seconds(value: Any) -> float:
    """Float seconds since the epoch from ctxadmin's ISO 8601 text or a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return datetime.fromisoformat(str(value)).timestamp()


# ------------------------------------------------------------------ items to events


def _text_parts(content: Any, kinds: Mapping[str, str]) -> list[dict[str, str]]:
    """The text parts of a message's ``content`` (a string, or a list of typed parts of
    which ``kinds`` maps a type to the key holding its text)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, Mapping) and part.get("type") in kinds:
            text = part.get(kinds[part["type"]])
            if isinstance(text, str) and text:
                parts.append({"text": text})
    return parts


def _finite(value: str) -> float:
    raise ValueError(f"not a finite number: {value}")


def _args(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the object ADK keeps (JSON text of an object, parsed)."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments, parse_constant=_finite)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"arguments": arguments}


def _call_fits(call_id: Any, name: Any) -> bool:
    return (
        isinstance(call_id, str)
        and isinstance(name, str)
        and bool(_CALL_ID.match(call_id))
        and bool(_FUNCTION_NAME.match(name))
    )


def content_of(item: Mapping[str, Any], call_names: Mapping[str, str]) -> dict | None:
    """The ADK content an item stands for in a built context (``None``: none).
    ``call_names``: the function name of each call id known so far."""
    kind = item.get("type")
    role = item.get("role")
    if role is not None and kind in (None, "message"):
        if role == "assistant":
            parts = _text_parts(item.get("content"), {"output_text": "text", "refusal": "refusal"})
            return {"role": "model", "parts": parts}
        parts = _text_parts(item.get("content"), {"input_text": "text"})
        return {"role": "user", "parts": parts}
    if kind == "function_call":
        call_id, name = item.get("call_id"), item.get("name")
        if not _call_fits(call_id, name):
            return None
        call = {"id": call_id, "name": name, "args": _args(item.get("arguments"))}
        return {"role": "model", "parts": [{"function_call": call}]}
    if kind == "function_call_output":
        call_id = item.get("call_id")
        name = call_names.get(call_id) if isinstance(call_id, str) else None
        if not _call_fits(call_id, name):
            return None
        response = {"id": call_id, "name": name, "response": {"output": item.get("output")}}
        return {"role": "user", "parts": [{"function_response": response}]}
    return None


def author_of(item: Mapping[str, Any]) -> str:
    role = item.get("role")
    if role is not None and item.get("type") in (None, "message") and role != "assistant":
        return "user"
    return ASSISTANT


def call_names(items: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each function call's name by its call id."""
    return {
        item["call_id"]: item["name"]
        for item in items
        if item.get("type") == "function_call"
        and isinstance(item.get("call_id"), str)
        and isinstance(item.get("name"), str)
    }


def unnamed_outputs(items: Iterable[Mapping[str, Any]], names: Mapping[str, str]) -> set[str]:
    """The call ids of the function outputs whose call is not in ``names``."""
    return {
        item["call_id"]
        for item in items
        if item.get("type") == "function_call_output"
        and isinstance(item.get("call_id"), str)
        and item["call_id"] not in names
    }


def item_event(item: Mapping[str, Any], names: Mapping[str, str], timestamp: float) -> dict:
    """The append body of one item."""
    event_id = new_id()
    event: dict[str, Any] = {
        "event_id": event_id,
        "invocation_id": event_id,
        "author": author_of(item),
        "timestamp": timestamp,
        "output": item,
        "custom_metadata": {MARK: ITEM},
    }
    content = content_of(item, names)
    if content is not None:
        event["content"] = content
    return event


def pop_event(invocation_id: str, timestamp: float) -> dict:
    """The rewind that takes an item (its own invocation) out of the session."""
    event_id = new_id()
    return {
        "event_id": event_id,
        "invocation_id": event_id,
        "author": "user",
        "timestamp": timestamp,
        "actions": {"rewind_before_invocation_id": invocation_id},
        "custom_metadata": {MARK: POP},
    }


# ------------------------------------------------------------------ events to items


@dataclass(frozen=True)
class Entry:
    """One item of the history: a stored item (``event_id`` set) or the text of a
    ctxadmin compaction summary standing for the items it covers (``event_id`` None)."""

    item: dict[str, Any]
    event_id: str | None
    invocation_id: str | None


def _is_item(event: Mapping[str, Any]) -> bool:
    marker = (event.get("custom_metadata") or {}).get(MARK)
    return marker == ITEM and isinstance(event.get("output"), dict)


def _summary(event: Mapping[str, Any]) -> tuple[float, dict] | None:
    """A ctxadmin compaction summary's end time and the item it reads as."""
    custom = event.get("custom_metadata") or {}
    compaction = (event.get("actions") or {}).get("compaction")
    if not custom.get("checkpoint_id") or not isinstance(compaction, Mapping):
        return None
    content = compaction.get("compacted_content") or {}
    text = "\n\n".join(
        part["text"] for part in content.get("parts") or () if isinstance(part.get("text"), str)
    )
    if not text:
        return None
    return seconds(compaction.get("end_timestamp", 0)), {"role": "assistant", "content": text}


def history(events: Sequence[Mapping[str, Any]], *, complete: bool, summaries: bool) -> list[Entry]:
    """The items the events (oldest first) hold after their rewinds; with ``summaries``,
    each ctxadmin compaction summary stands, as its text, where the span it covers ends
    (after the items up to its end time). ``complete``: the events are the whole session;
    else they are its newest, and a rewind of an invocation that began before them hides
    every item before it (they all came after that invocation began)."""
    entries: list[tuple[float, Entry]] = []
    found: list[tuple[float, dict]] = []
    for event in events:
        rewind = (event.get("actions") or {}).get("rewind_before_invocation_id")
        if rewind:
            first = next((i for i, (_, e) in enumerate(entries) if e.invocation_id == rewind), None)
            if first is not None:
                del entries[first:]
            elif not complete:
                entries.clear()
            continue
        if _is_item(event):
            stamp = seconds(event["timestamp"]) if event.get("timestamp") else math.inf
            entries.append(
                (stamp, Entry(dict(event["output"]), event["event_id"], event.get("invocation_id")))
            )
        elif summaries and (summary := _summary(event)) is not None:
            found.append(summary)
    for end, item in sorted(found, key=lambda pair: pair[0]):
        at = next((i for i, (stamp, _) in enumerate(entries) if stamp > end), len(entries))
        entries.insert(at, (end, Entry(item, None, None)))
    return [entry for _, entry in entries]
