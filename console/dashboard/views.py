"""The operator dashboard: a page of server-rendered SVG charts and the JSON it refreshes
from. Both are staff-only (wrapped in ``admin.site.admin_view`` in the URLconf) and both carry
counts, times and app names only: no content, no user or session ids."""

from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.http import JsonResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from console.dashboard import selectors
from console.dashboard.charts import Series, bar_list, column_chart, number
from memory import selectors as memory_selectors

REFRESH_SECONDS = 15


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "none waiting"
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def _sum_series(*series: list[int]) -> list[int]:
    return [sum(values) for values in zip(*series, strict=True)]


def present(data: dict) -> dict:
    """The figures (short texts) and charts (SVG) of the dashboard, from the selectors'
    numbers, and those numbers in JSON-ready form."""
    hours: list[datetime] = data["hours"]
    slots = [hour.strftime("%H:00") for hour in hours]
    titles = [hour.strftime("%Y-%m-%d %H:00 UTC") for hour in hours]
    window = f"last {len(hours)} h"

    def columns(name: str, label: str, series: list[Series], unit: str) -> str:
        return column_chart(name, label, slots, series, unit=unit, slot_titles=titles)

    events = data["events_per_hour"]
    compactions = data["compactions"]
    cache = data["invocations"]["cache_per_hour"]
    invocation_status = data["invocations"]["status_per_hour"]
    outbox = data["outbox"]
    ended = outbox["ended_per_hour"]
    entries = data["cache_entries"]
    memory = data["memory"]
    searched = data["searches"]

    cache_used = {outcome: sum(cache[outcome]) for outcome in ("hit", "created", "bypass")}
    used = sum(cache_used.values())
    invocations_total = sum(sum(values) for values in invocation_status.values())
    invocations_failed = sum(invocation_status["failed"])
    compactions_requested = sum(compactions["requested"])
    compactions_failed = sum(compactions["failed"])
    outbox_ended = sum(sum(values) for values in ended.values())
    outbox_failed = sum(ended["failed"])

    figures = {
        "generated_at": data["now"].strftime("%H:%M:%S UTC"),
        "window": window,
        "events_total": number(sum(events)),
        "events_this_hour": number(events[-1]),
        "compactions_committed": number(sum(compactions["committed"])),
        "tokens_saved": number(sum(compactions["saved_per_hour"])),
        "outbox_active": number(sum(outbox["active_by_phase"].values())),
        "outbox_oldest_due": _duration(outbox["oldest_due_age_seconds"]),
        "outbox_expired_leases": number(outbox["expired_leases"]),
        "outbox_rows": number(outbox["rows"]),
        "extraction_runs": number(outbox["extraction"]["runs"]),
        "extraction_refused": number(outbox["extraction"]["refused"]),
        "extraction_tokens": number(outbox["extraction"]["tokens"]),
        "extraction_deferred": number(outbox["extraction"]["deferred_for_budget"]),
        "cache_hit_ratio": _percent(cache_used["hit"], used),
        "cache_bypass_ratio": _percent(cache_used["bypass"], used),
        "cache_used": number(used),
        "cache_entries_active": number(entries["by_state"]["active"]),
        "cache_hits_on_entries": number(entries["hits_on_entries"]),
        "memory_entries": number(memory["entries"]),
        "memory_keyed": number(memory["keyed"]),
        "memory_closed_versions": number(memory["closed_versions"]),
        "memory_apps": number(memory["apps_with_entries"]),
        "memory_searches": number(searched["total"]),
        "mcp_calls": number(data["mcp_calls"]),
        "invocations_failed": f"{number(invocations_failed)} of {number(invocations_total)}",
        "invocations_failed_rate": _percent(invocations_failed, invocations_total),
        "compactions_failed": f"{number(compactions_failed)} of {number(compactions_requested)}",
        "compactions_failed_rate": _percent(compactions_failed, compactions_requested),
        "outbox_failed": f"{number(outbox_failed)} of {number(outbox_ended)}",
        "outbox_failed_rate": _percent(outbox_failed, outbox_ended),
    }
    charts = {
        "events": columns(
            "events",
            f"Events stored per hour, {window}",
            [Series("events", "blue", events)],
            "events",
        ),
        "compaction_savings": columns(
            "compaction_savings",
            f"Tokens saved by compactions per hour, {window}",
            [Series("tokens saved", "green", compactions["saved_per_hour"])],
            "tokens saved",
        ),
        "outbox_backlog": bar_list(
            "outbox_backlog",
            "Ingestion jobs active now, by phase",
            list(outbox["active_by_phase"].items()),
            unit="jobs",
            color="orange",
            row_title="phase",
        ),
        "outbox_ended": columns(
            "outbox_ended",
            f"Ingestion jobs ended per hour, {window}",
            [
                Series("completed", "green", ended["completed"]),
                Series("failed", "red", ended["failed"]),
                Series("cancelled", "grey", ended["cancelled"]),
            ],
            "jobs",
        ),
        "cache": columns(
            "cache",
            f"Invocations per hour by prefix-cache outcome, {window}",
            [
                Series("hit", "green", cache["hit"]),
                Series("created", "blue", cache["created"]),
                Series("bypass", "orange", cache["bypass"]),
                Series("not used", "grey", _sum_series(cache["off"], cache["none"])),
            ],
            "invocations",
        ),
        "memory": bar_list(
            "memory",
            "Memory entries per app",
            [(app["app"], app["entries"]) for app in memory["apps"]],
            unit="entries",
        ),
        "searches": columns(
            "searches",
            f"Memory searches per hour, {window}",
            [Series("searches", "blue", searched["per_hour"])],
            "searches",
        ),
        "searches_per_app": bar_list(
            "searches_per_app",
            f"Memory searches per app, {window}",
            [(app["app"], app["searches"]) for app in searched["apps"]],
            unit="searches",
        ),
        "errors": columns(
            "errors",
            f"Failures per hour, {window}",
            [
                Series("invocations", "red", invocation_status["failed"]),
                Series("compactions", "orange", compactions["failed"]),
                Series("ingestion jobs", "purple", ended["failed"]),
            ],
            "failures",
        ),
    }
    numbers = {
        **data,
        "now": data["now"].isoformat(),
        "hours": [hour.isoformat() for hour in hours],
    }
    return {"generated_at": numbers["now"], "figures": figures, "charts": charts, "data": numbers}


def _refresh_seconds(request) -> int:
    value = request.GET.get("refresh", "")
    if value.isascii() and value.isdigit() and 2 <= int(value) <= 3600:
        return int(value)
    return REFRESH_SECONDS


def dashboard_page(request):
    shown = present(selectors.dashboard())
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "figures": shown["figures"],
        "charts": shown["charts"],
        "generated_at": shown["generated_at"],
        "data_url": reverse("admin-dashboard-data"),
        "refresh_seconds": _refresh_seconds(request),
        "memory_apps_shown": memory_selectors.APPS_SHOWN,
        "memory_more_apps": (
            shown["data"]["memory"]["apps_with_entries"] > memory_selectors.APPS_SHOWN
        ),
    }
    return TemplateResponse(request, "admin/dashboard.html", context)


def dashboard_data(request):
    response = JsonResponse(present(selectors.dashboard()))
    response["Cache-Control"] = "no-store"
    return response
