"""Projecting large tool responses (pure; no Django import): a response over the limit is
replaced in the context by a stub naming the artifact that keeps it whole.
"""

from __future__ import annotations

import hashlib
import re

from ctxadmin.canonical import canonical_json, canonical_size
from sessions_app.compaction.model import SourceEvent

_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9](?!.*\.\.)[A-Za-z0-9._:@-]{0,255}\Z")


def projected_artifact_name(event_id: str, index: int) -> str | None:
    """The session artifact that keeps part ``index`` of the event's original tool response
    (None when the event id cannot make an artifact name: the event itself stays then)."""
    name = f"tool-output.{event_id}.{index}"
    return name if _ARTIFACT_NAME.match(name) else None


def projection(response: dict, event_id: str, index: int = 0) -> dict:
    """A deterministic stand-in for a large tool response: hash, size, and where the
    original is stored (a session artifact holding the response's canonical JSON)."""
    body = canonical_json(response.get("response"))
    artifact = projected_artifact_name(event_id, index)
    return {
        **{k: v for k, v in response.items() if k != "response"},
        "response": {
            "projected": True,
            "sha256": hashlib.sha256(body).hexdigest(),
            "bytes": len(body),
            "original": f"artifact:{artifact}" if artifact else f"event:{event_id}",
        },
    }


def project_items(events: list[SourceEvent], over_bytes: int) -> tuple[list[dict], list[str]]:
    items, projected = [], []
    for event in events:
        item = event.item
        content = event.content
        if content and event.responses:
            parts = []
            changed = False
            for index, part in enumerate(content.get("parts") or []):
                response = part.get("function_response")
                if response is not None and canonical_size(response.get("response")) > over_bytes:
                    parts.append({"function_response": projection(response, event.event_id, index)})
                    changed = True
                else:
                    parts.append(part)
            if changed:
                item = {**item, "content": {**content, "parts": parts}}
                projected.append(event.event_id)
        items.append(item)
    return items, projected
