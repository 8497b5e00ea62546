"""Every writer of a session's checkpoints takes the session row before it writes: an append
on the locking path queues its automatic check while it holds the row. Were another writer's
row written first (the check a fast append queues after its own statement, a compaction
request, a worker recording a skipped check), it would wait for the session row in its
foreign-key check while the append waited for that row's uniqueness: a deadlock, which
PostgreSQL breaks after a second by failing one of them (a 503 for an append that was
stored, or a check left running)."""

from __future__ import annotations

import threading
import time
from unittest import mock

import psycopg
import pytest
from django.db import connection, connections, transaction

from sessions_app.compaction import worker
from sessions_app.compaction.triggers import request_automatic
from sessions_app.models import Checkpoint, Session
from sessions_app.tasks import run_compaction
from tests.conftest import database_url_for_current_connection, make_tenant
from tests.sessions_helpers import sessions_url

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_for_a_lock(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]


# What is in flight afterwards: the locked append's check, the request that replaced it, or
# nothing (the append found the claimed check in flight, which was then skipped).
IN_FLIGHT = {
    "fast_append_check": ["automatic"],
    "compaction_request": ["manual"],
    "skipped_check": [],
}


@pytest.mark.parametrize("writer", sorted(IN_FLIGHT))
def test_an_append_holding_the_session_and_another_checkpoint_writer_do_not_deadlock(writer):
    tenant = make_tenant("acme")
    client = tenant.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    session_pk = Session.objects.get(session_id="s").pk
    url = database_url_for_current_connection()
    errors: list[Exception] = []
    claimed = None
    if writer == "skipped_check":  # a worker runs a check that finds nothing to do
        with mock.patch.object(run_compaction, "delay_on_commit"):
            request_automatic(session_pk)
        claimed = worker.claim(str(Checkpoint.objects.get(session_id=session_pk).pk))

    def write() -> None:
        try:
            if writer == "fast_append_check":
                request_automatic(session_pk)  # in autocommit, as after a fast append
            elif writer == "skipped_check":
                assert worker.run_claimed(claimed, claimed.session).status == "skipped"
            else:
                answer = client.post(
                    f"{sessions_url('acme')}/s/compactions", {"async": True}, format="json"
                )
                assert answer.status_code == 202, answer.content
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    other = threading.Thread(target=write)
    with mock.patch.object(run_compaction, "delay_on_commit"):
        with transaction.atomic():
            with connection.cursor() as cursor:  # what the locking path holds
                cursor.execute(
                    "SELECT 1 FROM sessions_app_session WHERE id = %s FOR UPDATE", [session_pk]
                )
            other.start()
            deadline = time.monotonic() + 10
            while not waiting_for_a_lock(url) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert waiting_for_a_lock(url), "the other check did not wait for the session row"
            request_automatic(session_pk)  # the locking path's own check
        other.join(timeout=30)
    assert not other.is_alive()
    assert errors == []
    in_flight = Checkpoint.objects.filter(session_id=session_pk, status__in=["pending", "running"])
    assert [row.origin for row in in_flight] == IN_FLIGHT[writer]
