"""The dashboard's reads: counts and times only, each over an index or a small bounded table.

- events per hour: ``sessions_app_event.created_at`` over the window (BRIN index);
- compactions per hour by outcome and the tokens they saved (``checkpoint_created``);
- invocations per hour by cache outcome and status (``invocation_status``, status leading);
- outbox: active jobs by phase (the partial indexes of active jobs: at most
  ``CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS`` rows), jobs that ended in the window
  (``outbox_terminal``), all rows (the one-row count the triggers keep);
- cache entries by state (bounded by each app's ``max_entries``);
- memory entries per app from the per-scope counts the memory triggers keep (one row per
  (app, user) scope, never the entries themselves).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, F, Min, Q, Sum
from django.db.models.functions import Coalesce, TruncHour

from caching.models import STATES as CACHE_STATES
from caching.models import CacheEntry
from ctxadmin.models import App
from memory.models import OutboxJob, OutboxRows, ScopeStats, SearchCount
from sessions_app.models import Checkpoint, Event, Invocation

WINDOW_HOURS = 48
MEMORY_APPS_SHOWN = 20
CACHE_OUTCOMES = ("hit", "created", "bypass", "off")
INVOCATION_STATUSES = (Invocation.RUNNING, Invocation.COMPLETED, Invocation.FAILED)


def _window(hours: int) -> tuple[datetime, list[datetime]]:
    """The database's clock, and the start of each hour of the window (oldest first, the
    current hour last)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp(), date_trunc('hour', statement_timestamp())")
        now, hour = cursor.fetchone()
    return now, [hour - timedelta(hours=hours - 1 - i) for i in range(hours)]


def _per_hour(hours: list[datetime], counts: dict[datetime, float]) -> list[float]:
    return [counts.get(hour, 0) for hour in hours]


def events_per_hour(hours: list[datetime]) -> list[int]:
    rows = (
        Event.objects.filter(created_at__gte=hours[0])
        .annotate(hour=TruncHour("created_at"))
        .values("hour")
        .annotate(n=Count("*"))
        .values_list("hour", "n")
    )
    return _per_hour(hours, dict(rows))


def compactions(hours: list[datetime]) -> dict:
    """Compactions requested in each hour, by outcome, and the tokens the committed ones
    saved (the effective context's estimate before minus after)."""
    committed = Q(status__in=Checkpoint.COMMITTED)
    rows = (
        Checkpoint.objects.filter(created_at__gte=hours[0])
        .annotate(hour=TruncHour("created_at"))
        .values("hour")
        .annotate(
            requested=Count("*"),
            committed=Count("pk", filter=committed),
            failed=Count("pk", filter=Q(status=Checkpoint.FAILED)),
            saved_per_hour=Coalesce(
                Sum(
                    Coalesce(F("tokens_before"), 0) - Coalesce(F("tokens_after"), 0),
                    filter=committed,
                ),
                0,
            ),
        )
    )
    by_hour = {row.pop("hour"): row for row in rows}
    keys = ("requested", "committed", "failed", "saved_per_hour")
    return {key: [by_hour[h][key] if h in by_hour else 0 for h in hours] for key in keys}


def invocations(hours: list[datetime]) -> dict:
    """Invocations started in each hour, by prefix-cache outcome and by status."""
    rows = (
        # Every status named: the (status, created_at) index then serves the window.
        Invocation.objects.filter(status__in=INVOCATION_STATUSES, created_at__gte=hours[0])
        .annotate(hour=TruncHour("created_at"))
        .values_list("hour", "status", "cache_status")
        .annotate(n=Count("*"))
    )
    by_cache: dict[str, dict[datetime, int]] = defaultdict(dict)
    by_status: dict[str, dict[datetime, int]] = defaultdict(dict)
    for hour, status, cache_status, n in rows:
        outcome = cache_status if cache_status in CACHE_OUTCOMES else "none"
        by_cache[outcome][hour] = by_cache[outcome].get(hour, 0) + n
        by_status[status][hour] = by_status[status].get(hour, 0) + n
    return {
        "cache_per_hour": {
            outcome: _per_hour(hours, by_cache[outcome]) for outcome in (*CACHE_OUTCOMES, "none")
        },
        "status_per_hour": {
            status: _per_hour(hours, by_status[status]) for status in INVOCATION_STATUSES
        },
    }


def outbox(now: datetime, hours: list[datetime]) -> dict:
    """Active jobs by phase; the oldest job waiting past its due time and the running jobs
    whose lease has expired (as ``memory.outbox.stats``, for every app); jobs that ended in
    each hour, by phase; and all rows, active and ended."""
    active = dict(
        OutboxJob.objects.filter(phase__in=OutboxJob.ACTIVE)
        .values_list("phase")
        .annotate(n=Count("*"))
    )
    due = OutboxJob.objects.filter(phase__in=OutboxJob.ACTIVE, due_at__lte=now).aggregate(
        oldest_due=Min("due_at", filter=~Q(phase=OutboxJob.RUNNING)),
        expired_leases=Count("pk", filter=Q(phase=OutboxJob.RUNNING)),
    )
    ended = (
        OutboxJob.objects.filter(phase__in=OutboxJob.TERMINAL, finished_at__gte=hours[0])
        .annotate(hour=TruncHour("finished_at"))
        .values_list("hour", "phase")
        .annotate(n=Count("*"))
    )
    ended_per_hour: dict[str, dict[datetime, int]] = defaultdict(dict)
    for hour, phase, n in ended:
        ended_per_hour[phase][hour] = n
    rows = OutboxRows.objects.filter(pk=1).values_list("total", flat=True).first()
    return {
        "active_by_phase": {phase: active.get(phase, 0) for phase in OutboxJob.ACTIVE},
        "oldest_due_age_seconds": (
            (now - due["oldest_due"]).total_seconds() if due["oldest_due"] else None
        ),
        "expired_leases": due["expired_leases"],
        "ended_per_hour": {
            phase: _per_hour(hours, ended_per_hour[phase]) for phase in OutboxJob.TERMINAL
        },
        "rows": rows or 0,
    }


def cache_entries() -> dict:
    rows = CacheEntry.objects.values_list("state").annotate(n=Count("*"), hits=Sum("hits"))
    by_state = {state: 0 for state in CACHE_STATES}
    hits = 0
    for state, n, state_hits in rows:
        by_state[state] = n
        hits += state_hits or 0
    return {"by_state": by_state, "hits_on_entries": hits}


def searches(hours: list[datetime], limit: int = MEMORY_APPS_SHOWN) -> dict:
    """Memory searches (the API's and the context builder's) per hour, and per app over the
    window, from the hourly counts each search upserts."""
    rows = list(
        SearchCount.objects.filter(hour__gte=hours[0]).values_list("app_id", "hour", "searches")
    )
    per_hour: dict[datetime, int] = {}
    per_app: dict[int, int] = {}
    for app, hour, n in rows:
        per_hour[hour] = per_hour.get(hour, 0) + n
        per_app[app] = per_app.get(app, 0) + n
    top = sorted(per_app.items(), key=lambda item: (-item[1], item[0]))[:limit]
    names = dict(App.objects.filter(pk__in=[app for app, _n in top]).values_list("pk", "name"))
    return {
        "per_hour": _per_hour(hours, per_hour),
        "total": sum(per_app.values()),
        "apps": [{"app": names.get(app, f"#{app}"), "searches": n} for app, n in top],
    }


def memory_per_app(limit: int = MEMORY_APPS_SHOWN) -> dict:
    """Entries and scopes per app from the trigger-kept scope counts (an entry counts until
    it is purged, expired or not): the totals, and the ``limit`` apps holding the most."""
    rows = list(
        ScopeStats.objects.values_list("app_id")
        .annotate(entries=Sum("entries"), scopes=Count("*"))
        .order_by("-entries", "app_id")
    )
    shown = rows[:limit]
    names = dict(App.objects.filter(pk__in=[app for app, *_ in shown]).values_list("pk", "name"))
    return {
        "entries": sum(int(entries) for _app, entries, _scopes in rows),
        "apps_with_entries": len(rows),
        "apps": [
            {"app": names.get(app, f"#{app}"), "entries": int(entries), "scopes": scopes}
            for app, entries, scopes in shown
        ],
    }


def dashboard(hours: int = WINDOW_HOURS) -> dict:
    """Everything the dashboard shows, as plain numbers and times."""
    now, slots = _window(hours)
    return {
        "now": now,
        "hours": slots,
        "events_per_hour": events_per_hour(slots),
        "compactions": compactions(slots),
        "invocations": invocations(slots),
        "outbox": outbox(now, slots),
        "cache_entries": cache_entries(),
        "memory": memory_per_app(),
        "searches": searches(slots),
    }
