"""A keyed memory's versions: its history (who wrote each) and a rollback to one of them
(``memory.facts`` decides where a version goes; ``memory.entries`` writes it)."""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from ctxadmin.errors import ServiceError
from ctxadmin.models import App
from memory.entries import ENTRY_COLUMNS, LIVE, _entry, add_memory, get_memory
from memory.inputs import (
    NewMemory,
)

_VERSION_COLUMNS = f"{ENTRY_COLUMNS}, written_by, job_id::text"


def _version(row) -> dict:
    *columns, written_by, job_id = row
    entry = _entry(columns)
    entry["written_by"] = {
        "key_prefix": written_by or None,
        "job_id": job_id,
        "event_id": entry["provenance"]["event_id"],
    }
    return entry


def memory_history(app: App, user_id: str, memory_id: str) -> list[dict]:
    """The versions of the memory's key (the memory alone when it has none), oldest valid
    first (at most ``CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS``, as pruning keeps), each with
    who wrote it; unexpired versions only. 404 as a get is."""
    entry = get_memory(app, user_id, memory_id)
    with connection.cursor() as cursor:
        if entry["key"] is None:
            where, params = "id = %s", [entry["id"]]
        else:
            where, params = "key = %s", [entry["key"]]
        cursor.execute(
            f"SELECT {_VERSION_COLUMNS} FROM memory_memoryentry "  # noqa: S608
            f"WHERE app_id = %s AND user_id = %s AND {where} AND {LIVE} "
            "ORDER BY valid_from, recorded_at, memory_memoryentry.id LIMIT %s",
            [app.pk, user_id, *params, settings.CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS + 1],
        )
        return [_version(row) for row in cursor.fetchall()]


def rollback_memory(
    app: App, user_id: str, memory_id: str, written_by: str = ""
) -> tuple[dict, bool]:
    """A closed version's content and metadata again, as a new version of its key valid
    from now (superseding the live one); (the new version, created). 409
    ``memory_not_keyed`` for a memory without a key, 409 ``memory_version_live`` for the
    live version; the live version's content already: that version (200)."""
    entry = get_memory(app, user_id, memory_id)
    if entry["key"] is None:
        raise ServiceError(
            "memory_not_keyed",
            "This memory has no key, so no versions to roll back to.",
            status_code=409,
        )
    if entry["valid_to"] is None:
        raise ServiceError(
            "memory_version_live",
            "This is the live version of its key: there is nothing to roll back.",
            status_code=409,
        )
    new = NewMemory(
        content=entry["content"],
        metadata=entry["metadata"],
        idempotency_key=None,
        session_id="",
        event_id="",
        author="",
        source_timestamp=None,
        embed="auto",
        key=entry["key"],
    )
    return add_memory(app, user_id, new, written_by=written_by)
