"""Automatic compaction in a real Celery worker: queued on commit after an append that
completes an invocation, at most one pending or running per session, never twice at once."""

from __future__ import annotations

import threading
import time

import pytest
from celery.signals import before_task_publish
from django.db import IntegrityError, connections, transaction

from sessions_app.compaction.triggers import request_automatic
from sessions_app.models import Checkpoint, CompactionState, Session
from tests.conftest import make_tenant
from tests.sessions_helpers import sessions_url, text

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def wait_for(condition, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    return None


@pytest.fixture
def published():
    sent: list[tuple] = []

    def record(sender=None, body=None, **kwargs):
        sent.append((sender, body[0] if body else None))

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)


def test_a_completed_invocation_compacts_in_the_worker(celery_worker_process, published):
    tenant = make_tenant("acme")
    api = tenant.client()
    base = f"{sessions_url('acme')}/s"
    api.post(sessions_url("acme"), {"session_id": "s"}, format="json")
    policy = {"token_threshold": None, "event_threshold": 8, "retain_recent_exchanges": 1}
    assert api.put(f"{base}/compaction-policy", policy, format="json").status_code == 200

    in_flight_seen: list[int] = []
    stop = threading.Event()

    def watch():
        try:
            while not stop.is_set():
                in_flight_seen.append(
                    Checkpoint.objects.filter(status__in=["pending", "running"]).count()
                )
                time.sleep(0.005)
        finally:
            connections.close_all()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for turn in range(12):
            result = api.post(
                f"{base}/events",
                {
                    "events": [
                        text("user", words(40, f"ask{turn}-"), event_id=f"u{turn}"),
                        text("agent", words(40, f"reply{turn}-"), event_id=f"m{turn}"),
                    ]
                },
                format="json",
            )
            assert result.status_code == 201
        done = wait_for(
            lambda: (
                not Checkpoint.objects.filter(status__in=["pending", "running"]).exists()
                and Checkpoint.objects.filter(status="active").first()
            )
        )
    finally:
        stop.set()
        watcher.join()
    assert done is not None, celery_worker_process["log"].read_text()[-3000:]
    assert done.origin == "automatic" and done.trigger == "event_threshold"
    # Tasks carry the checkpoint id only.
    assert all(task == "sessions_app.run_compaction" for task, _args in published)
    assert all(len(args) == 1 and len(args[0]) == 36 for _task, args in published)
    assert max(in_flight_seen) <= 1
    committed = list(Checkpoint.objects.filter(status__in=["active", "superseded"]))
    assert committed and all(c.origin == "automatic" for c in committed)
    assert not Checkpoint.objects.filter(status="failed").exists()
    # Checks that found nothing to do left no rows, only counters.
    state = CompactionState.objects.filter(session=Session.objects.get()).first()
    assert state is None or state.checks >= 0
    built = api.post(
        f"{base}/context",
        {"current_input": {"role": "user", "parts": [{"text": "next"}]}},
        format="json",
    ).json()
    assert built["accounting"]["events"]["hidden_by_compaction"] > 0


def test_concurrent_requests_queue_one_check(celery_worker_process):
    tenant = make_tenant("acme")
    api = tenant.client()
    api.post(sessions_url("acme"), {"session_id": "s"}, format="json")
    session = Session.objects.get()
    with transaction.atomic():
        Checkpoint.objects.create(
            id="00000000-0000-4000-8000-00000000000a",
            session=session,
            status="running",
            origin="manual",
        )
        # The partial unique index refuses a second in-flight row, whatever its origin.
        with pytest.raises(IntegrityError), transaction.atomic():
            Checkpoint.objects.create(
                id="00000000-0000-4000-8000-00000000000b",
                session=session,
                status="pending",
                origin="automatic",
            )

    barrier = threading.Barrier(8)

    def request():
        try:
            barrier.wait()
            request_automatic(session.pk)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Checkpoint.objects.filter(status__in=["pending", "running"]).count() == 1
