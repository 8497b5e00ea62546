"""What the context builder's memory slot says of each hit's versions, read in one query
for all hits: its key, when it became valid and, when it superseded another version, that
version's content (``before``, cut to ``MAX_BEFORE_CHARS`` characters here and to bytes by
the renderer)."""

from __future__ import annotations

from django.db import connection

from ctxadmin.models import App

MAX_BEFORE_CHARS = 256


def with_versions(app: App, user_id: str, hits: list[dict]) -> list[dict]:
    """``hits`` with ``key``, ``valid_from``, ``recorded_at`` and ``before`` (the content of
    the unexpired version this one superseded, else None), in one statement."""
    if not hits:
        return hits
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.id::text, e.key, to_json(e.valid_from) #>> '{}', "
            "to_json(e.recorded_at) #>> '{}', before.content "
            "FROM memory_memoryentry e LEFT JOIN LATERAL ("
            "SELECT left(p.content, %s) AS content FROM memory_memoryentry p "
            "WHERE p.superseded_by_id = e.id AND p.app_id = e.app_id AND p.user_id = e.user_id "
            "AND (p.expires_at IS NULL OR p.expires_at > now()) "
            "ORDER BY p.valid_from DESC LIMIT 1) before ON e.key IS NOT NULL "
            "WHERE e.app_id = %s AND e.user_id = %s AND e.id = ANY(%s::uuid[])",
            [MAX_BEFORE_CHARS, app.pk, user_id, list({hit["id"] for hit in hits})],
        )
        found = {row[0]: row[1:] for row in cursor.fetchall()}
    annotated = []
    for hit in hits:
        key, valid_from, recorded_at, before = found.get(hit["id"], (None, None, None, None))
        annotated.append(
            {
                **hit,
                "key": key,
                "valid_from": valid_from,
                "recorded_at": recorded_at,
                "before": before,
            }
        )
    return annotated
