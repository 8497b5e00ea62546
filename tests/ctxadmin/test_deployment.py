"""A deployment's tasks reach only its own workers: the queue and broker keys come from the
deployment's database, and a worker handed another deployment's task gives it back."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings

from config.celery import app
from ctxadmin import deployment
from ctxadmin.models import WorkerProbe
from tests.conftest import start_celery_worker


def test_the_identity_is_the_database_and_never_its_credentials():
    one = deployment.deployment_id("127.0.0.1", 55432, "ctxadmin")
    assert one == deployment.deployment_id("127.0.0.1", "55432", "ctxadmin")
    assert one != deployment.deployment_id("127.0.0.1", 55434, "ctxadmin")
    assert one != deployment.deployment_id("127.0.0.1", 55432, "staging")
    assert deployment.queue_name(one) == f"ctxadmin.{one}"
    assert deployment.broker_key_prefix(deployment.queue_name(one)) == f"ctxadmin.{one}:"


def test_a_named_deployment_must_be_a_plain_name():
    assert deployment.validate_deployment("staging-2") == "staging-2"
    for bad in ("", "a b", "x" * 65, "-lead", "a:b"):
        with pytest.raises(ValueError, match="CTXADMIN_DEPLOYMENT"):
            deployment.validate_deployment(bad)


def test_only_workers_of_another_deployment_are_foreign():
    replies = [
        {"worker@a": {"deployment": "ours", "queue": "q"}},
        {"worker@b": {"deployment": "theirs", "queue": "q"}},
        {"worker@c": {"error": "No such inspect command"}},
    ]
    assert deployment.foreign_replies(replies, "ours") == [
        ("worker@b", "theirs"),
        ("worker@c", "unknown"),
    ]
    assert deployment.foreign_replies(None, "ours") == []


def test_the_broker_keys_carry_the_queue():
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] == f"{queue}:"


def _broker_holds(client: redis.Redis, task_id: str) -> bool:
    """The task's message is still in the broker: queued, or delivered and not acknowledged."""
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    queued = client.lrange(f"{prefix}{settings.CELERY_TASK_DEFAULT_QUEUE}", 0, -1)
    unacked = client.hvals(f"{prefix}unacked")
    return any(task_id.encode() in message for message in [*queued, *unacked])


@pytest.mark.django_db(transaction=True)
def test_a_worker_gives_back_a_task_of_another_deployment(tmp_path):
    probe = WorkerProbe.objects.create()
    worker = start_celery_worker(tmp_path)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        sent = app.send_task(
            "ctxadmin.complete_worker_probe",
            args=[str(probe.pk)],
            headers={deployment.TASK_HEADER: "another-deployment"},
        )
        deadline = time.monotonic() + 60
        while b"task of another deployment handed back" not in worker.log.read_bytes():
            assert time.monotonic() < deadline, worker.log.read_text()[-3000:]
            time.sleep(0.2)
        probe.refresh_from_db()
        assert probe.completed_at is None
        assert _broker_holds(client, sent.id)
    finally:
        worker.stop()
        app.control.purge()
        client.close()
    # The deployment's own task, published the ordinary way, is run.
    own = start_celery_worker(tmp_path / "own")
    try:
        from ctxadmin.probes import start_worker_probe, wait_for_probe

        assert wait_for_probe(start_worker_probe(), 60) is not None
    finally:
        own.stop()
