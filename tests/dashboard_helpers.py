"""A tenant's activity for the dashboard tests: a session of distinctive text, a checkpoint
made from it, an ingestion job and a memory, all through the API."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.db import connection

from memory.models import OutboxJob
from sessions_app.models import Checkpoint, Event, Invocation, Session
from tests.sessions_helpers import sessions_url, text

# Text, ids and state that only the conversation holds: no dashboard page may show them.
DISTINCTIVE = "zebra-quartz-browser"
USER = "okapi-marmalade"
SESSION = "s-heliotrope"
TURNS = 5


def seed_activity(client, app: str = "acme") -> dict:
    """Returns the compaction and the ingestion job as the API answered them."""
    sessions = sessions_url(app, USER)
    created = client.post(
        sessions, {"session_id": SESSION, "state": {"note": f"state {DISTINCTIVE}"}}, format="json"
    )
    assert created.status_code == 201, created.content
    session = f"{sessions}/{SESSION}"
    policy = {"token_threshold": 10, "retain_recent_exchanges": 1}
    put = client.put(f"{session}/compaction-policy", policy, format="json")
    assert put.status_code == 200, put.content
    for turn in range(1, TURNS + 1):
        events = [
            text("user", f"please file the {DISTINCTIVE} report {turn} today", event_id=f"u{turn}"),
            text("agent", f"filed {DISTINCTIVE} report {turn} for you", event_id=f"m{turn}"),
        ]
        appended = client.post(f"{session}/events", {"events": events}, format="json")
        assert appended.status_code == 201, appended.content
    compaction = client.post(f"{session}/compactions", {}, format="json")
    assert compaction.status_code == 201, compaction.content
    memories = f"/api/v1/apps/{app}/users/{USER}/memories"
    job = client.post(f"{memories}/ingestions", {"session_id": SESSION}, format="json")
    assert job.status_code == 202, job.content
    memory = client.post(memories, {"content": f"{DISTINCTIVE} likes tea"}, format="json")
    assert memory.status_code == 201, memory.content
    for query in ("tea", "coffee"):
        searched = client.post(f"{memories}/search", {"query": query}, format="json")
        assert searched.status_code == 200, searched.content
    return {"compaction": compaction.json(), "job": job.json()}


def content_texts() -> list[str]:
    """What no console page may show: the conversation's words (in events, the checkpoint's
    summary, the job's payload, the memory) and the session's state."""
    return [DISTINCTIVE, "zebra-quartz"]


def dashboard_forbidden_texts() -> list[str]:
    """The dashboard shows no user or session ids either (the admin pages do: ids)."""
    return [*content_texts(), USER, SESSION]


# Long enough for the fake provider's prefix cache (``min_prefix_tokens``).
INSTRUCTIONS = " ".join(f"Rule {i}: answer briefly and cite policy {i}." for i in range(80))


def invoke(client, invocation_id: str, words: str, app: str = "acme"):
    """One invocation of the fake model on the seeded session, asking for the prefix cache."""
    body = {
        "invocation_id": invocation_id,
        "input": {"role": "user", "parts": [{"text": words}]},
        "agent": {"provider": "fake", "model": "fake-1", "instructions": INSTRUCTIONS},
        "cache": {"ttl_ms": 600_000, "min_prefix_tokens": 100},
    }
    url = f"{sessions_url(app, USER)}/{SESSION}/invocations"
    answer = client.post(url, body, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def seed_history(client, app, hours: int = 48) -> None:
    """Two days of activity behind the seeded session, so that every chart has a shape:
    events appended through the API (then dated back to their hour), and invocation,
    checkpoint and ingestion-job rows as the services leave them, dated in the past."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('hour', statement_timestamp())")
        this_hour = cursor.fetchone()[0]
    sessions = sessions_url(app.name, "history-user")
    for sid in ("s-history", "s-history-compactions"):
        assert client.post(sessions, {"session_id": sid}, format="json").status_code == 201
    session = Session.objects.get(app=app, session_id="s-history")
    compacted = Session.objects.get(app=app, session_id="s-history-compactions")
    invocations, checkpoints, jobs = [], [], []
    for ago in range(hours - 1, 0, -1):
        at = this_hour - timedelta(hours=ago, minutes=-17)
        busy = 9 <= at.hour <= 18
        count = 3 + (ago * 7) % 11 + (12 if busy else 0)
        events = [
            text(
                "user" if i % 2 == 0 else "agent", f"history note {ago}.{i}", event_id=f"h{ago}-{i}"
            )
            for i in range(count)
        ]
        appended = client.post(f"{sessions}/s-history/events", {"events": events}, format="json")
        assert appended.status_code == 201, appended.content
        Event.objects.filter(session=session, event_id__startswith=f"h{ago}-").update(created_at=at)
        for i in range(1 + (ago * 5) % 4 + (3 if busy else 0)):
            cache_status = ("hit", "hit", "hit", "created", "bypass", "off")[(ago + i) % 6]
            failed = (ago + i) % 17 == 0
            invocations.append(
                Invocation(
                    session=session,
                    invocation_id=f"history-{ago}-{i}",
                    status=Invocation.FAILED if failed else Invocation.COMPLETED,
                    provider="fake",
                    model="fake-1",
                    request_fingerprint="0" * 64,
                    cache_status="" if failed else cache_status,
                    error_code="provider_timeout" if failed else "",
                    created_at=at,
                )
            )
        if ago % 3 == 0:
            failed = ago % 21 == 0
            key = uuid.uuid4()
            checkpoints.append(
                Checkpoint(
                    id=key,
                    compaction_id=key,
                    app_id=compacted.app_id,
                    session=compacted,
                    status=Checkpoint.FAILED if failed else Checkpoint.SUPERSEDED,
                    origin="automatic",
                    trigger="token_threshold",
                    reason="summary_too_large" if failed else "",
                    tokens_before=None if failed else 4000 + (ago * 137) % 3000,
                    tokens_after=None if failed else 600 + (ago * 53) % 400,
                    created_at=at,
                    finished_at=at,
                )
            )
        if ago % 2 == 0:
            failed = ago % 16 == 0
            jobs.append(
                OutboxJob(
                    id=uuid.uuid4(),
                    app=app,
                    user_id="history-user",
                    scope_fingerprint="0" * 64,
                    session_id="s-history",
                    adapter="session_events",
                    erasure_epoch=0,
                    phase=OutboxJob.FAILED if failed else OutboxJob.COMPLETED,
                    payload_bytes=0,
                    events=count,
                    first_seq=1,
                    last_seq=count,
                    attempts=5 if failed else 1,
                    max_attempts=5,
                    due_at=at,
                    error_code="attempts_exhausted" if failed else "",
                    created_at=at,
                    finished_at=at,
                )
            )
    Invocation.objects.bulk_create(invocations)
    Checkpoint.objects.bulk_create(checkpoints)
    OutboxJob.objects.bulk_create(jobs)
