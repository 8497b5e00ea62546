"""Builders for the ingestion outbox tests: sessions full of events, admissions, waits."""

from __future__ import annotations

import time

from django.db import connection

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
