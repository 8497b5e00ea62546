"""One stored session event as an outbox payload item: its text with credentials
redacted, or the reason it is skipped."""

from __future__ import annotations

from django.conf import settings

from ctxadmin.pruning import looks_like_secret, redact_secret_text
from ctxadmin.timestamps import iso_timestamp
from memory import ingest
from memory.fillers import carries_no_fact
from memory.inputs import REDACTED


def sanitise(row: dict) -> tuple[dict, bool]:
    """One stored event as a payload item, and whether credentials were redacted from it.

    An item to write keeps the event's id, seq, author, role, timestamp and text (with any
    credential-looking span replaced by ``[redacted]``); an item to skip keeps only its id,
    seq and the reason: ``partial``, ``control`` (no text part: state or artifact changes),
    ``empty``, ``too_large`` (over ``CTXADMIN_MEMORY_MAX_CONTENT_BYTES``), ``secret`` (nothing
    left once redacted), ``no_fact`` (filler: ``memory.fillers``)."""
    base = {"event_id": row["event_id"], "seq": row["seq"]}
    unfit = ingest.unfit_reason(row)
    if unfit is not None:
        return {**base, "skip": unfit}, False
    text = ingest.event_text(row).replace("\x00", "")
    redacted = False
    if looks_like_secret(text):
        text = redact_secret_text(text).strip()
        redacted = True
        if not text.replace(REDACTED, "").strip() or looks_like_secret(text):
            return {**base, "skip": "secret"}, True
    if len(text.encode("utf-8")) > settings.CTXADMIN_MEMORY_MAX_CONTENT_BYTES:
        return {**base, "skip": "too_large"}, redacted
    if carries_no_fact(text):
        return {**base, "skip": "no_fact"}, redacted
    return {
        **base,
        "author": row["author"],
        "role": (row["content"] or {}).get("role") or row.get("role") or "",
        "timestamp": iso_timestamp(row["timestamp"]),
        "text": text,
    }, redacted
