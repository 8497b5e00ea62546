"""Building compaction engine inputs in tests."""

from __future__ import annotations

from ctxadmin.canonical import canonical_size
from sessions_app.compaction.model import SourceEvent


def source_event(
    seq: int,
    author: str,
    *,
    text: str | None = None,
    call: tuple[str, str] | None = None,
    response: tuple[str, str, object] | None = None,
    invocation: str = "",
    turn_complete: bool | None = None,
) -> SourceEvent:
    if text is not None:
        role = "user" if author == "user" else "model"
        parts = [{"text": text}]
    elif call is not None:
        role, parts = "model", [{"function_call": {"id": call[0], "name": call[1], "args": {}}}]
    else:
        assert response is not None
        call_id, name, body = response
        role = "user"
        parts = [{"function_response": {"id": call_id, "name": name, "response": body}}]
    item = {
        "event_id": f"e{seq}",
        "invocation_id": invocation,
        "author": author,
        "timestamp": f"2026-01-01T00:00:{seq % 60:02d}+00:00",
        "content": {"role": role, "parts": parts},
    }
    return SourceEvent(
        seq=seq,
        event_id=f"e{seq}",
        invocation_id=invocation,
        author=author,
        item=item,
        context_bytes=canonical_size(item),
        timestamp=1_767_225_600.0 + seq,
        turn_complete=turn_complete,
    )


def user(seq: int, text: str | None = None, **kw) -> SourceEvent:
    return source_event(seq, "user", text=text or f"user request number {seq} " * 8, **kw)


def model(seq: int, text: str | None = None, **kw) -> SourceEvent:
    return source_event(seq, "agent", text=text or f"model answer number {seq} " * 8, **kw)


def call(seq: int, call_id: str, name: str = "lookup", **kw) -> SourceEvent:
    return source_event(seq, "agent", call=(call_id, name), **kw)


def response(seq: int, call_id: str, body=None, name: str = "lookup", **kw) -> SourceEvent:
    return source_event(
        seq, "tool", response=(call_id, name, body if body is not None else {"ok": seq}), **kw
    )
