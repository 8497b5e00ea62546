"""Reads for tenancy."""

from __future__ import annotations

from django.db.models import Count, Q

from ctxadmin.models import App


def app_summary(app: App) -> dict:
    keys = app.api_keys.aggregate(
        active=Count("id", filter=Q(revoked_at__isnull=True)),
        revoked=Count("id", filter=Q(revoked_at__isnull=False)),
    )
    return {
        "app": app.name,
        "display_name": app.display_name,
        "created_at": app.created_at,
        "api_keys": keys,
    }


def mcp_calls_since(since) -> int:
    """MCP tool calls of every app since ``since`` (an hour's start): the hourly counts in
    PostgreSQL and those not yet moved there from Redis."""
    from django.db.models import Sum

    from ctxadmin import mcp_calls
    from ctxadmin.models import McpCallCount

    stored = McpCallCount.objects.filter(hour__gte=since).aggregate(n=Sum("calls"))["n"] or 0
    start = since.timestamp()
    recent = {key: n for key, n in mcp_calls.pending().items() if key[1] >= start}
    named = {app for app, _hour in recent}
    apps = set(App.objects.filter(pk__in=named).values_list("pk", flat=True))
    return stored + sum(n for (app, _hour), n in recent.items() if app in apps)
