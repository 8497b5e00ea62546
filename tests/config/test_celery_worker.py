"""A real Celery worker process executes tasks published on commit, and only then."""

from __future__ import annotations

import pytest
from celery.signals import before_task_publish
from django.db import connection, transaction

from config.celery import TaskArgumentError
from ctxadmin.models import WorkerProbe
from ctxadmin.probes import start_worker_probe, wait_for_probe
from ctxadmin.tasks import complete_worker_probe


@pytest.fixture
def published():
    """Messages actually handed to the broker during the test (Celery's own signal)."""
    sent: list[dict] = []

    def record(sender=None, headers=None, body=None, **kwargs):
        sent.append({"task": sender, "id": headers["id"], "in_atomic": connection.in_atomic_block})

    before_task_publish.connect(record, weak=False)
    yield sent
    before_task_publish.disconnect(record)


@pytest.mark.django_db(transaction=True)
def test_a_worker_process_completes_a_task_enqueued_on_commit(celery_worker_process, published):
    probe = start_worker_probe()
    assert [message["task"] for message in published] == ["ctxadmin.complete_worker_probe"]
    assert published[0]["in_atomic"] is False  # published after the commit, not inside it
    done = wait_for_probe(probe, timeout=30)
    assert done is not None, celery_worker_process["log"].read_text()[-3000:]
    assert done.worker  # written by the worker process, not by this one
    assert done.completed_at >= done.created_at


@pytest.mark.django_db(transaction=True)
def test_nothing_is_published_when_the_transaction_rolls_back(celery_worker_process, published):
    with pytest.raises(RuntimeError), transaction.atomic():
        WorkerProbe.objects.create()
        complete_worker_probe.delay_on_commit("00000000-0000-0000-0000-000000000000")
        raise RuntimeError("roll back")
    assert published == []
    assert WorkerProbe.objects.count() == 0


def test_tasks_take_identifiers_never_content():
    with pytest.raises(TaskArgumentError):
        complete_worker_probe.delay("the user said: my password is hunter2")
    with pytest.raises(TaskArgumentError):
        complete_worker_probe.delay_on_commit({"content": "x"})
