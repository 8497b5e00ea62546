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
    """MCP tool calls of every app since ``since`` (an hour's start), from the hourly counts."""
    from django.db.models import Sum

    from ctxadmin.models import McpCallCount

    return McpCallCount.objects.filter(hour__gte=since).aggregate(n=Sum("calls"))["n"] or 0
