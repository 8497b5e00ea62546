"""The dashboard's reads, each the owning app's selector: counts and times only, each over an
index or a small bounded table.

- events per hour: ``sessions_app_event.created_at`` over the window (BRIN index);
- compactions per hour by outcome and the tokens they saved (``checkpoint_created``);
- invocations per hour by cache outcome and status (``invocation_status``, status leading);
- outbox: active jobs by phase (the partial indexes of active jobs: at most
  ``CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS`` rows), jobs that ended in the window
  (``outbox_terminal``), all rows (the one-row count the triggers keep);
- cache entries by state (bounded by each app's ``max_entries``);
- MCP tool calls over the window, from the hourly counts each call upserts;
- memory entries per app from the per-scope counts the memory triggers keep (one row per
  (app, user) scope, never the entries themselves).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection

from caching import selectors as caching
from ctxadmin.selectors import mcp_calls_since
from memory import selectors as memory
from sessions_app import selectors as sessions

WINDOW_HOURS = 48


def _window(hours: int) -> tuple[datetime, list[datetime]]:
    """The database's clock, and the start of each hour of the window (oldest first, the
    current hour last)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp(), date_trunc('hour', statement_timestamp())")
        now, hour = cursor.fetchone()
    return now, [hour - timedelta(hours=hours - 1 - i) for i in range(hours)]


def dashboard(hours: int = WINDOW_HOURS) -> dict:
    """Everything the dashboard shows, as plain numbers and times."""
    now, slots = _window(hours)
    return {
        "now": now,
        "hours": slots,
        "events_per_hour": sessions.events_per_hour(slots),
        "compactions": sessions.compactions_per_hour(slots),
        "invocations": sessions.invocations_per_hour(slots),
        "outbox": memory.outbox_summary(now, slots),
        "cache_entries": caching.entries_by_state(),
        "memory": memory.memory_per_app(),
        "searches": memory.searches_per_hour(slots),
        "mcp_calls": mcp_calls_since(slots[0]),
    }
