"""``/healthz`` (alive), ``/readyz`` (dependencies, each by name) and ``/metrics``."""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ctxadmin.api.errors import error_response
from ctxadmin.models import ApiKey, App
from ctxadmin.stack import redis_answers


@require_GET
def index(request):
    """``/``: where things are, for a person or a client that starts at the root."""
    return JsonResponse(
        {
            "service": "ctxadmin",
            "api": "/api/v1/",
            "docs": "/api/docs/",
            "schema": "/api/schema/",
            "console": "/admin/",
            "health": "/healthz",
            "readiness": "/readyz",
        }
    )


@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


def _check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return "reachable"


def _check_pgvector() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        raise LookupError("the vector extension is not installed in this database")
    return f"vector {row[0]}"


def _check_migrations() -> str:
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        raise LookupError(f"{len(pending)} migration(s) not applied")
    return "applied"


def _check_redis() -> str:
    if not redis_answers(settings.CELERY_BROKER_URL, timeout=1.0):
        raise ConnectionError("the broker does not answer PING")
    return "reachable"


READINESS_CHECKS: dict[str, Callable[[], str]] = {
    "database": _check_database,
    "pgvector": _check_pgvector,
    "migrations": _check_migrations,
    "redis": _check_redis,
}


@require_GET
def readyz(request):
    """Each dependency by name with ok/detail; 503 when any fails. Details are fixed
    phrases or exception class names: never hosts, credentials or queries."""
    results: dict[str, dict] = {}
    database_ok = True
    for name, check in READINESS_CHECKS.items():
        if name in {"pgvector", "migrations"} and not database_ok:
            results[name] = {"ok": False, "detail": "database unreachable"}
            continue
        started = time.perf_counter()
        try:
            detail = check()
            ok = True
        except (LookupError, ConnectionError) as exc:
            ok, detail = False, str(exc)
        except DatabaseError as exc:
            ok, detail = False, type(exc).__name__
        except Exception as exc:
            ok, detail = False, type(exc).__name__
        if name == "database" and not ok:
            database_ok = False
        results[name] = {
            "ok": ok,
            "detail": detail,
            "ms": round((time.perf_counter() - started) * 1000, 1),
        }
    ready = all(item["ok"] for item in results.values())
    return JsonResponse(
        {"status": "ready" if ready else "unavailable", "checks": results},
        status=200 if ready else 503,
    )


class TenancyCollector:
    """Gauges read from PostgreSQL at scrape time (counts only)."""

    def collect(self):
        up = GaugeMetricFamily("ctxadmin_database_up", "1 when the database answered the scrape.")
        try:
            apps = App.objects.count()
            keys_active = ApiKey.objects.active().count()
            keys_total = ApiKey.objects.count()
        except DatabaseError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily("ctxadmin_apps", "Apps (tenants).", value=apps)
        keys = GaugeMetricFamily("ctxadmin_api_keys", "API keys by state.", labels=["state"])
        keys.add_metric(["active"], keys_active)
        keys.add_metric(["revoked"], keys_total - keys_active)
        yield keys


class _ProcessMetrics:
    """This process's own counters (one process: no multiprocess directory to read)."""

    def collect(self):
        yield from REGISTRY.collect()


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_ProcessMetrics())
    registry.register(TenancyCollector())
    return registry


@require_GET
def metrics(request):
    token = settings.CTXADMIN_METRICS_TOKEN
    if token:
        supplied = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(supplied.encode(), token.encode()):
            return error_response(401, "not_authenticated", "A metrics token is required.")
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
