"""An asynchronous compaction whose worker dies (SIGKILL, OOM) is not lost: a worker claims it
under a lease; once the lease has ended, the sweeper hands it to another worker, which
commits it exactly once; a worker whose run was claimed again since writes nothing; a run
whose workers keep dying fails, and the session can compact again."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import connection

from sessions_app.compaction import worker
from sessions_app.models import Checkpoint, Event
from sessions_app.tasks import run_compaction, sweep_compactions
from tests.conftest import make_tenant
from tests.sessions_helpers import sessions_url, text

SESSION = f"{sessions_url('acme')}/s"


@pytest.fixture
def api(db):
    client = make_tenant("acme").client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    for turn in range(1, 5):
        events = [
            text("user", " ".join(f"ask{turn}-{i}" for i in range(40)), event_id=f"u{turn}"),
            text("agent", " ".join(f"reply{turn}-{i}" for i in range(40)), event_id=f"m{turn}"),
        ]
        result = client.post(f"{SESSION}/events", {"events": events}, format="json")
        assert result.status_code == 201, result.content
    return client


def request_async(api) -> str:
    """The requested compaction's own key: what its task, claims and leases go by."""
    result = api.post(f"{SESSION}/compactions", {"async": True}, format="json")
    assert result.status_code == 202, result.content
    return str(Checkpoint.objects.get(compaction_id=result.json()["compaction_id"]).pk)


def end_lease(checkpoint_id: str) -> None:
    """What the passing of time does to a dead worker's lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sessions_app_checkpoint "
            "SET lease_expires_at = statement_timestamp() - interval '1 second' WHERE id = %s",
            [checkpoint_id],
        )


def summaries(checkpoint_id: str) -> int:
    compaction_id = Checkpoint.objects.get(pk=checkpoint_id).compaction_id
    return Event.objects.filter(event_id=f"compaction-{compaction_id}").count()


def test_a_run_whose_worker_died_is_taken_over_once_its_lease_ends(api):
    checkpoint_id = request_async(api)
    assert worker.claim(checkpoint_id) is not None  # a worker claims it, then is killed
    # The broker delivers the task again at once: the lease still holds, nothing runs.
    assert run_compaction.run(checkpoint_id) == "not_pending"
    with mock.patch.object(run_compaction, "delay") as publish:
        assert sweep_compactions.run()["reclaimable"] == 0
        end_lease(checkpoint_id)
        assert sweep_compactions.run()["reclaimable"] == 1
    publish.assert_called_once_with(checkpoint_id)
    assert run_compaction.run(checkpoint_id) == "active"
    row = Checkpoint.objects.get(pk=checkpoint_id)
    assert row.attempts == 2
    assert summaries(checkpoint_id) == 1
    assert run_compaction.run(checkpoint_id) == "not_pending"


def test_a_worker_whose_run_was_taken_over_writes_nothing(api):
    checkpoint_id = request_async(api)
    slow = worker.claim(checkpoint_id)
    end_lease(checkpoint_id)
    fresh = worker.claim(checkpoint_id)
    assert (slow.attempts, fresh.attempts) == (1, 2)
    assert worker.run_claimed(slow, slow.session).status == "running"  # lost: no commit
    assert summaries(checkpoint_id) == 0
    assert worker.run_claimed(fresh, fresh.session).status == "active"
    assert worker.run_claimed(slow, slow.session).status == "active"  # still nothing
    assert summaries(checkpoint_id) == 1
    assert Checkpoint.objects.filter(status__in=["active", "superseded"]).count() == 1


def test_a_run_whose_workers_keep_dying_fails_and_the_session_compacts_again(api):
    checkpoint_id = request_async(api)
    for _attempt in range(worker.MAX_ATTEMPTS):
        assert worker.claim(checkpoint_id) is not None
        end_lease(checkpoint_id)
    assert worker.claim(checkpoint_id) is None
    with mock.patch.object(run_compaction, "delay") as publish:
        swept = sweep_compactions.run()
    assert (swept["reclaimable"], swept["worker_lost"]) == (0, 1)
    publish.assert_not_called()
    row = Checkpoint.objects.get(pk=checkpoint_id)
    assert (row.status, row.reason) == ("failed", "worker_lost")
    assert api.post(f"{SESSION}/compactions", {}, format="json").status_code == 201
