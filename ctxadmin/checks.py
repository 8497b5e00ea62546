"""System checks with stable ids for deployment mistakes (``memory.checks`` holds the
memory app's own, under the same id series).

ctxadmin.E001  the pgvector extension is missing from the database (database check)
ctxadmin.E002  the built-in development SECRET_KEY is used with DEBUG off
ctxadmin.W002  the built-in development SECRET_KEY is used (DEBUG on)
ctxadmin.E003  no Celery broker is configured
ctxadmin.W004  DEBUG is on (deployment check)
"""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections


@register(Tags.database)
def check_pgvector(app_configs=None, databases=None, **kwargs):
    errors = []
    for alias in databases or []:
        connection = connections[alias]
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
                available = cursor.fetchone() is not None
                cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
                installed = cursor.fetchone() is not None
        except DatabaseError:
            continue  # unreachable databases are reported by Django and /readyz
        if not installed:
            hint = (
                "Run `CREATE EXTENSION vector;` as a superuser, or `manage.py migrate`."
                if available
                else "Install pgvector on the PostgreSQL server "
                "(https://github.com/pgvector/pgvector) "
                "or use the embedded default (unset DATABASE_URL)."
            )
            errors.append(
                Error(
                    f"The pgvector extension is not installed in database {alias!r}.",
                    hint=hint,
                    id="ctxadmin.E001",
                )
            )
    return errors


@register(Tags.security)
def check_secret_key(app_configs=None, **kwargs):
    if settings.SECRET_KEY != settings.INSECURE_DEFAULT_SECRET_KEY:
        return []
    hint = "Set SECRET_KEY or SECRET_KEY_FILE (or let `manage.py run` generate var/secret_key)."
    if settings.DEBUG:
        return [
            Warning("The built-in development SECRET_KEY is in use.", hint=hint, id="ctxadmin.W002")
        ]
    return [
        Error(
            "The built-in development SECRET_KEY is in use with DEBUG off: sessions and "
            "signatures can be forged by anyone who has read this code.",
            hint=hint,
            id="ctxadmin.E002",
        )
    ]


@register()
def check_broker(app_configs=None, **kwargs):
    if not getattr(settings, "CELERY_BROKER_URL", None):
        return [
            Error(
                "No Celery broker is configured: compaction, ingestion and cache cleanup "
                "would never run.",
                hint="Set REDIS_URL (or CELERY_BROKER_URL).",
                id="ctxadmin.E003",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def check_debug(app_configs=None, **kwargs):
    if settings.DEBUG:
        return [Warning("DEBUG is on.", hint="Unset DEBUG in production.", id="ctxadmin.W004")]
    return []
