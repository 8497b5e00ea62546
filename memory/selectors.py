"""What other apps may read of memory (the console's dashboard): counts of the outbox's
jobs, of searches and of entries, per hour or per app. Ids and numbers, never content."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db import connection
from django.db.models import Count, Min, Q, Sum
from django.db.models.functions import TruncHour

from ctxadmin.models import App
from ctxadmin.series import per_hour
from memory.models import (
    ExtractionRun,
    MemoryEntry,
    OutboxJob,
    OutboxRows,
    ScopeStats,
    SearchCount,
)

#: The apps the dashboard lists by searches and by entries.
APPS_SHOWN = 20


def outbox_summary(now: datetime, hours: list[datetime]) -> dict:
    """Active jobs by phase; the oldest job waiting past its due time and the running jobs
    whose lease has expired (as ``memory.outbox.operations.stats``, for every app); jobs
    that ended in each hour, by phase; all rows, active and ended; and the extraction runs
    of the window (answers, refusals, tokens) with the jobs waiting for a token budget."""
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
    runs = ExtractionRun.objects.filter(created_at__gte=hours[0]).aggregate(
        runs=Count("pk"),
        refused=Count("pk", filter=Q(outcome=ExtractionRun.REFUSED)),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
    )
    deferred = OutboxJob.objects.filter(
        phase__in=OutboxJob.ACTIVE, error_code="extraction_budget_exhausted"
    ).count()
    return {
        "active_by_phase": {phase: active.get(phase, 0) for phase in OutboxJob.ACTIVE},
        "oldest_due_age_seconds": (
            (now - due["oldest_due"]).total_seconds() if due["oldest_due"] else None
        ),
        "expired_leases": due["expired_leases"],
        "ended_per_hour": {
            phase: per_hour(hours, ended_per_hour[phase]) for phase in OutboxJob.TERMINAL
        },
        "rows": rows or 0,
        "extraction": {
            "runs": runs["runs"],
            "refused": runs["refused"],
            "tokens": (runs["input_tokens"] or 0) + (runs["output_tokens"] or 0),
            "deferred_for_budget": deferred,
        },
    }


def searches_per_hour(hours: list[datetime], limit: int = APPS_SHOWN) -> dict:
    """Memory searches (the API's and the context builder's) per hour, and per app over the
    window, from the hourly counts each search upserts."""
    rows = list(
        SearchCount.objects.filter(hour__gte=hours[0]).values_list("app_id", "hour", "searches")
    )
    by_hour: dict[datetime, int] = {}
    per_app: dict[int, int] = {}
    for app, hour, n in rows:
        by_hour[hour] = by_hour.get(hour, 0) + n
        per_app[app] = per_app.get(app, 0) + n
    top = sorted(per_app.items(), key=lambda item: (-item[1], item[0]))[:limit]
    names = dict(App.objects.filter(pk__in=[app for app, _n in top]).values_list("pk", "name"))
    return {
        "per_hour": per_hour(hours, by_hour),
        "total": sum(per_app.values()),
        "apps": [{"app": names.get(app, f"#{app}"), "searches": n} for app, n in top],
    }


def memory_per_app(limit: int = APPS_SHOWN) -> dict:
    """Entries and scopes per app from the trigger-kept scope counts (an entry counts until
    it is purged, expired or not): the totals, and the ``limit`` apps holding the most."""
    rows = list(
        ScopeStats.objects.values_list("app_id")
        .annotate(entries=Sum("entries"), scopes=Count("*"))
        .order_by("-entries", "app_id")
    )
    shown = rows[:limit]
    names = dict(App.objects.filter(pk__in=[app for app, *_ in shown]).values_list("pk", "name"))
    # Facts over time: the entries with a key (the partial index of keyed entries), and of
    # them the closed versions (superseded, kept in their key's history).
    versions = MemoryEntry.objects.filter(key__isnull=False).aggregate(
        keyed=Count("id"), closed=Count("id", filter=Q(valid_to__isnull=False))
    )
    return {
        "entries": sum(int(entries) for _app, entries, _scopes in rows),
        "keyed": versions["keyed"],
        "closed_versions": versions["closed"],
        "apps_with_entries": len(rows),
        "apps": [
            {"app": names.get(app, f"#{app}"), "entries": int(entries), "scopes": scopes}
            for app, entries, scopes in shown
        ],
    }


def entry_sizes_in_scope(app: App, user_id: str, ids: list[str]) -> dict[str, tuple]:
    """Of the entries ``ids``, those in the exact (app, user) scope: id -> (content bytes,
    created at, source timestamp). The console checks each search hit against it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text, content_bytes, created_at, source_timestamp "
            "FROM memory_memoryentry "
            "WHERE app_id = %s AND user_id = %s AND id = ANY(%s::uuid[])",
            [app.pk, user_id, ids],
        )
        return {row[0]: row[1:] for row in cursor.fetchall()}


def outbox_job(job_id) -> OutboxJob | None:
    """An outbox job of any app, with its app (the operator's command names jobs by id)."""
    return OutboxJob.objects.select_related("app").filter(pk=job_id).first()
