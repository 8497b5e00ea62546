"""Builders for the ingestion outbox tests: sessions full of events, admissions, waits."""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import connection

from memory.models import OutboxJob
from tests.sessions_helpers import sessions_url, text

SECRET = "my api_key=sk-outboxSECRETabcdefghijklmnop and I hike on Sundays"


def memories_url(app: str, user: str) -> str:
    return f"/api/v1/apps/{app}/users/{user}/memories"


def session_with_events(
    client, app: str, user: str, sid: str, count: int, *, secret_at: int | None = None
) -> None:
    """A session of ``count`` text events (alternately user and model), event ids
    ``<sid>-<n>``; event ``secret_at`` (0-based) carries a credential."""
    created = client.post(sessions_url(app, user), {"session_id": sid}, format="json")
    assert created.status_code == 201, created.content
    events = []
    for n in range(count):
        words = SECRET if n == secret_at else f"{sid} remembers fact number {n} about {user}"
        author = "user" if n % 2 == 0 else "agent"
        events.append(text(author, words, event_id=f"{sid}-{n}"))
    for start in range(0, count, 500):
        appended = client.post(
            f"{sessions_url(app, user)}/{sid}/events",
            {"events": events[start : start + 500]},
            format="json",
        )
        assert appended.status_code == 201, appended.content


def admit(client, app: str, user: str, sid: str, status: int | None = 202, **extra):
    result = client.post(
        f"{memories_url(app, user)}/ingestions", {"session_id": sid, **extra}, format="json"
    )
    if status is not None:
        assert result.status_code == status, result.content
    return result


def job(client, app: str, job_id: str) -> dict:
    result = client.get(f"/api/v1/apps/{app}/outbox/jobs/{job_id}")
    assert result.status_code == 200, result.content
    return result.json()


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def scope_entries(app_id: int, user: str) -> list[tuple[str, str]]:
    """(idempotency key, content) of every entry of the scope, expired or not."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT idempotency_key, content FROM memory_memoryentry "
            "WHERE app_id = %s AND user_id = %s ORDER BY idempotency_key",
            [app_id, user],
        )
        return cursor.fetchall()


def row(job_id: str) -> OutboxJob:
    return OutboxJob.objects.get(pk=job_id)


def set_due_now(job_id: str) -> None:
    """Make a job due (a retry's backoff or a lease, over): in the test's transaction the
    database clock stands still."""
    OutboxJob.objects.filter(pk=job_id).update(due_at=connection_now() - timedelta(seconds=1))


def connection_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]
