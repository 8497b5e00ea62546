"""A memory hit's neighbours: the entries of the same session said just before and just
after it (by the time each was said), live entries of the same (app, user) scope only.

An answer is often the turn after the question that finds it (or the question the turn
before the answer): the context builder packs a top hit's neighbours beside it. Nothing is
read beyond the scope the hit came from, so erasure, expiry and what ingestion skipped
(secrets, control events) hold for neighbours as for hits.
"""

from __future__ import annotations

from django.db import connection

from ctxadmin.models import App
from memory.entries import LIVE

_ENTRY = (
    "x.id::text, x.content, x.author, "
    "to_json(coalesce(x.source_timestamp, x.created_at)) #>> '{}', x.session_id, x.event_id"
)


def neighbours(
    app: App, user_id: str, hit_ids: list[str], filter_sql: str = "TRUE", filter_params=()
) -> dict[str, list[dict]]:
    """For each hit id that came from a session (with the time it was said), its previous
    and next entries of that session that pass the search's filter, as hits (``id``,
    ``content``, ``timestamp``, ``provenance``; previous first). One round trip, two
    probes of the partial index ``memory_session_order`` per hit (its condition repeated,
    so the planner can use it)."""
    if not hit_ids:
        return {}
    side = """
        (SELECT {direction} AS direction, {entry}
           FROM memory_memoryentry x
          WHERE x.app_id = h.app_id AND x.user_id = h.user_id AND x.session_id = h.session_id
            AND x.session_id <> '' AND x.source_timestamp IS NOT NULL
            AND x.source_timestamp {op} h.source_timestamp AND {live} AND ({filter_sql})
          ORDER BY x.source_timestamp {order}
          LIMIT 1)
    """
    common = {"entry": _ENTRY, "live": LIVE, "filter_sql": filter_sql}
    before = side.format(direction=-1, op="<", order="DESC", **common)
    after = side.format(direction=1, op=">", order="ASC", **common)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT h.id::text, n.*
              FROM memory_memoryentry h
              CROSS JOIN LATERAL ({before} UNION ALL {after}) n
             WHERE h.app_id = %s AND h.user_id = %s AND h.id = ANY(%s::uuid[])
               AND h.session_id <> '' AND h.source_timestamp IS NOT NULL
             ORDER BY h.id, n.direction
            """,  # noqa: S608 - constant fragments only
            [*filter_params, *filter_params, app.pk, user_id, hit_ids],
        )
        rows = cursor.fetchall()
    found: dict[str, list[dict]] = {}
    for hit_id, _direction, entry_id, content, author, stamp, session_id, event_id in rows:
        found.setdefault(hit_id, []).append(
            {
                "id": entry_id,
                "content": content,
                "timestamp": stamp,
                "provenance": {
                    "session_id": session_id or None,
                    "event_id": event_id or None,
                    "author": author or None,
                },
            }
        )
    return found
