"""The durable ingestion outbox, drained in this process: cancel, erasure, statistics,
limits, the cap, pruning, concurrent admission, the automatic path, redaction, indexes and
metrics (admission and the worker: ``test_outbox.py``)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test import override_settings

from memory.models import OutboxJob
from memory.outbox import leases, operations, worker
from memory.tasks import drain_outbox
from tests.conftest import make_tenant
from tests.outbox_helpers import (
    SECRET,
    admit,
    connection_now,
    job,
    memories_url,
    row,
    scope_entries,
    session_with_events,
)
from tests.sessions_helpers import sessions_url, text


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.mark.django_db
class TestCancelErasureStats:
    def test_cancel(self, api):
        session_with_events(api, "acme", "alice", "s", 2)
        session_with_events(api, "acme", "alice", "t", 2)
        admitted = admit(api, "acme", "alice", "s").json()
        url = f"/api/v1/apps/acme/outbox/jobs/{admitted['job_id']}/cancel"
        cancelled = api.post(url)
        assert cancelled.status_code == 200 and cancelled.json()["phase"] == "cancelled"
        assert cancelled.json()["error"]["code"] == "cancelled"
        assert api.post(url).status_code == 200  # again: the same answer
        assert row(admitted["job_id"]).payload == []
        assert worker.drain() == {}
        revived = admit(api, "acme", "alice", "s").json()  # admitted again: it runs
        assert revived["job_id"] == admitted["job_id"] and revived["phase"] == "pending"
        assert worker.drain() == {"completed": 1}
        done = admit(api, "acme", "alice", "t").json()
        worker.drain()
        ended = api.post(f"/api/v1/apps/acme/outbox/jobs/{done['job_id']}/cancel")
        assert ended.status_code == 409 and ended.json()["error"]["code"] == "outbox_job_ended"
        assert api.post(url, {"x": 1}, format="json").status_code == 400

    def test_cancelling_a_running_job_stops_it_before_its_next_batch(self, api, owner):
        session_with_events(api, "acme", "alice", "s", 3)
        admitted = admit(api, "acme", "alice", "s").json()
        claimed = worker.claim()
        api.post(f"/api/v1/apps/acme/outbox/jobs/{admitted['job_id']}/cancel")
        assert worker.process(claimed) == "lease_lost"
        assert scope_entries(owner.app.pk, "alice") == []

    def test_user_erasure_cancels_queued_jobs_and_a_new_epoch_makes_a_new_job(self, api, owner):
        session_with_events(api, "acme", "alice", "s", 3)
        admitted = admit(api, "acme", "alice", "s").json()
        erased = api.delete(
            memories_url("acme", "alice"), {"confirm": "erase user alice"}, format="json"
        )
        assert erased.status_code == 200, erased.content
        assert erased.json()["counts"]["queued_work"] == 1
        status = job(api, "acme", admitted["job_id"])
        assert status["phase"] == "cancelled" and status["error"]["code"] == "erased"
        assert status["session_id"] is None
        stored = row(admitted["job_id"])
        assert stored.payload == [] and stored.user_id == ""
        assert worker.drain() == {}
        again = admit(api, "acme", "alice", "s").json()
        assert again["job_id"] != admitted["job_id"] and again["erasure_epoch"] == 1
        assert again["deduplicated"] is False

    def test_user_erasure_while_running_ends_the_job_at_its_next_batch(self, api, owner):
        session_with_events(api, "acme", "alice", "s", 3)
        admitted = admit(api, "acme", "alice", "s").json()
        claimed = worker.claim()
        api.delete(memories_url("acme", "alice"), {"confirm": "erase user alice"}, format="json")
        assert row(admitted["job_id"]).payload == []  # cleared in the erasure
        assert worker.process(claimed) == "cancelled"
        status = job(api, "acme", admitted["job_id"])
        assert status["error"]["code"] == "stale_epoch" and status["session_id"] is None
        assert scope_entries(owner.app.pk, "alice") == []

    def test_session_erasure_cancels_that_sessions_jobs_only(self, api, owner):
        session_with_events(api, "acme", "alice", "gone", 2)
        session_with_events(api, "acme", "alice", "kept", 2)
        gone = admit(api, "acme", "alice", "gone").json()
        kept = admit(api, "acme", "alice", "kept").json()
        erased = api.delete(f"{memories_url('acme', 'alice')}?session_id=gone")
        assert erased.status_code == 200 and erased.json()["counts"]["queued_work"] == 1
        worker.drain()
        assert job(api, "acme", gone["job_id"])["phase"] == "cancelled"
        assert job(api, "acme", kept["job_id"])["phase"] == "completed"

    def test_stats(self, api):
        for sid in ("a", "b", "c"):
            session_with_events(api, "acme", "alice", sid, 2)
        ids = [admit(api, "acme", "alice", sid).json()["job_id"] for sid in ("a", "b", "c")]
        api.post(f"/api/v1/apps/acme/outbox/jobs/{ids[0]}/cancel")
        OutboxJob.objects.filter(pk=ids[1]).update(due_at=connection_now() - timedelta(seconds=30))
        stats = api.get("/api/v1/apps/acme/outbox/stats").json()
        assert stats["by_phase"]["pending"] == 2 and stats["by_phase"]["cancelled"] == 1
        assert stats["active"] == 2 and stats["active_bytes"] > 0
        assert stats["oldest_due_age_seconds"] >= 30 and stats["expired_leases"] == 0
        other = make_tenant("initech").client()
        empty = other.get("/api/v1/apps/initech/outbox/stats").json()
        assert empty["active"] == 0 and empty["oldest_due_age_seconds"] is None


@pytest.mark.django_db
class TestLimitsCapAndPruning:
    def test_bytes_limit_per_scope_names_itself(self, api, settings):
        settings.CTXADMIN_OUTBOX_MAX_ACTIVE_BYTES_PER_SCOPE = 200
        session_with_events(api, "acme", "alice", "big", 5)
        refused = admit(api, "acme", "alice", "big", status=429).json()["error"]
        assert refused["code"] == "outbox_capacity_exceeded"
        assert refused["details"] == {
            "limit": "active_bytes_per_scope",
            "maximum": 200,
            "retry_after_s": 10,
        }

    @override_settings(CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_APP=3, CTXADMIN_OUTBOX_SWEEP_SECONDS=7)
    def test_an_app_has_at_most_its_cap_of_open_jobs_whatever_its_users(self, api, owner):
        """Across the app's users (each far below its own cap): the fourth open job is 429
        ``outbox_capacity_exceeded`` naming ``active_jobs_per_app``, with when to retry;
        another app is not held back; a duplicate is never refused; once a job ends, room."""
        for user in ("alice", "bob", "carol", "dave"):
            session_with_events(api, "acme", user, "s", 1)
        ids = [admit(api, "acme", user, "s").json()["job_id"] for user in ("alice", "bob")]
        admit(api, "acme", "carol", "s")
        refused = admit(api, "acme", "dave", "s", status=429)
        error = refused.json()["error"]
        assert error["code"] == "outbox_capacity_exceeded"
        assert error["details"] == {
            "limit": "active_jobs_per_app",
            "maximum": 3,
            "retry_after_s": 7,
        }
        assert "This app has" in error["message"] and refused["Retry-After"] == "7"
        assert OutboxJob.objects.filter(user_id="dave").count() == 0  # nothing half-applied
        admit(api, "acme", "alice", "s", status=200)  # the same job, deduplicated
        other = make_tenant("globex").client()
        session_with_events(other, "globex", "alice", "s", 1)
        admit(other, "globex", "alice", "s")
        # A running job is open too; an ended one is not.
        OutboxJob.objects.filter(pk=ids[0]).update(phase=OutboxJob.RUNNING)
        admit(api, "acme", "dave", "s", status=429)
        operations.cancel(owner.app, ids[1])
        admit(api, "acme", "dave", "s")
        assert OutboxJob.objects.filter(app__name="acme", phase__in=OutboxJob.ACTIVE).count() == 3

    def test_the_cap_refuses_until_pruning_frees_room(self, api, settings):
        settings.CTXADMIN_OUTBOX_MAX_ROWS = 3
        for sid in ("a", "b", "c", "d", "e"):
            session_with_events(api, "acme", "alice", sid, 1)
        done = [admit(api, "acme", "alice", sid).json()["job_id"] for sid in ("a", "b")]
        worker.drain()
        live = admit(api, "acme", "alice", "c").json()["job_id"]
        refused = admit(api, "acme", "alice", "d", status=429).json()["error"]
        assert refused["code"] == "terminal_retention_full"
        assert refused["details"] == {"limit": "rows", "maximum": 3}
        # Pruning within the retention period removes nothing.
        assert operations.prune(10) == 0
        assert operations.prune(1, older_than=timedelta(0)) == 1
        remaining = {str(pk) for pk in OutboxJob.objects.values_list("id", flat=True)}
        assert remaining == {done[1], live}  # the oldest ended job went; the live one stays
        admit(api, "acme", "alice", "d")
        assert admit(api, "acme", "alice", "e", status=429).json()["error"]["code"] == (
            "terminal_retention_full"
        )
        # Only ended jobs are ever pruned.
        assert operations.prune(10, older_than=timedelta(0)) == 1
        assert {r.phase for r in OutboxJob.objects.all()} == {"pending"}

    def test_the_prune_task_uses_the_retention_setting(self, api, settings):
        settings.CTXADMIN_OUTBOX_RETENTION_SECONDS = 0
        settings.CTXADMIN_OUTBOX_PRUNE_BATCH = 2
        for sid in ("a", "b", "c"):
            session_with_events(api, "acme", "alice", sid, 1)
            admit(api, "acme", "alice", sid)
        worker.drain()
        from memory.tasks import prune_outbox

        assert prune_outbox() == 3
        assert OutboxJob.objects.count() == 0


@pytest.mark.django_db(transaction=True)
class TestConcurrentAdmission:
    def test_ten_concurrent_enqueues_in_one_scope_then_the_global_limit(
        self, settings, monkeypatch
    ):
        # The jobs must stay active: no worker of this run may be told to drain them.
        monkeypatch.setattr(drain_outbox, "delay_on_commit", lambda *args, **kwargs: None)
        settings.CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS = 4
        settings.CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_SCOPE = 2
        tenant = make_tenant("acme")
        client = tenant.client()
        for n in range(10):
            session_with_events(client, "acme", "alice", f"s{n}", 1)
        for user in ("bob", "carol"):
            session_with_events(client, "acme", user, "s", 1)
        barrier = threading.Barrier(10)
        codes: list[tuple[int, dict]] = []

        def enqueue(n: int) -> None:
            try:
                barrier.wait()
                result = tenant.client().post(
                    f"{memories_url('acme', 'alice')}/ingestions",
                    {"session_id": f"s{n}"},
                    format="json",
                )
                codes.append((result.status_code, result.json()))
            finally:
                connections.close_all()

        threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        accepted = [body for code, body in codes if code == 202]
        refused = [body["error"] for code, body in codes if code == 429]
        assert len(accepted) == 2 and len(refused) == 8
        assert all(e["details"]["limit"] == "active_jobs_per_scope" for e in refused)
        admit(client, "acme", "bob", "s")
        admit(client, "acme", "bob", "s", status=200)  # a duplicate is never refused
        admit(client, "acme", "carol", "s")  # the fourth active job
        assert OutboxJob.objects.filter(phase="pending").count() == 4
        session_with_events(client, "acme", "dave", "s", 1)
        refused = admit(client, "acme", "dave", "s", status=429).json()["error"]
        assert refused["details"] == {"limit": "active_jobs", "maximum": 4, "retry_after_s": 10}

    def test_the_drain_task_takes_ids_only(self):
        with pytest.raises(TypeError):
            drain_outbox.delay("the user's words")


@pytest.mark.django_db
class TestAutomaticPath:
    def test_on_success_admits_when_an_invocation_completes(
        self, api, owner, django_capture_on_commit_callbacks
    ):
        assert (
            api.put(
                "/api/v1/apps/acme/memory-policy", {"ingestion": "on_success"}, format="json"
            ).json()["ingestion"]
            == "on_success"
        )
        api.post(sessions_url("acme"), {"session_id": "auto"}, format="json")
        events_url = f"{sessions_url('acme')}/auto/events"

        def append(event):
            with django_capture_on_commit_callbacks() as published:
                assert api.post(events_url, {"event": event}, format="json").status_code == 201
            return published

        append(text("user", "I adopted a cat named Miso"))
        assert OutboxJob.objects.count() == 0  # the invocation has not completed
        assert len(append(text("agent", "Congratulations on Miso!", turn_complete=True))) == 1
        [first] = OutboxJob.objects.all()
        assert (first.first_seq, first.last_seq, first.events) == (1, 2, 2)
        append(text("user", "Miso is two years old"))
        append(text("agent", "Noted.", turn_complete=True))
        second = OutboxJob.objects.exclude(pk=first.pk).get()
        assert (second.first_seq, second.last_seq) == (3, 4)
        worker.drain()
        # "Noted." carries no fact: the rest is memory.
        assert len(scope_entries(owner.app.pk, "alice")) == 3
        second.refresh_from_db()
        assert (second.added, second.skipped_by_reason) == (1, {"no_fact": 1})

    @pytest.mark.django_db(transaction=True)  # the clock moves between statements
    def test_erased_memory_never_comes_back_from_older_events(self, monkeypatch):
        """After a user's or a session's erasure, the automatic path admits only the events
        appended since: the session's older events, still stored, stay out of memory."""
        # This test drains the jobs itself: no worker of this run is told of them.
        monkeypatch.setattr(drain_outbox, "delay_on_commit", lambda *args, **kwargs: None)
        owner = make_tenant("acme")
        api = owner.client()
        api.put("/api/v1/apps/acme/memory-policy", {"ingestion": "on_success"}, format="json")
        api.post(sessions_url("acme"), {"session_id": "auto"}, format="json")
        events_url = f"{sessions_url('acme')}/auto/events"

        def turn(user_words: str, answer: str) -> None:
            for event in (text("user", user_words), text("agent", answer, turn_complete=True)):
                assert api.post(events_url, {"event": event}, format="json").status_code == 201
            worker.drain()

        def remembered() -> list[str]:
            return sorted(content for _key, content in scope_entries(owner.app.pk, "alice"))

        turn("my sister is called Ana", "Noted, Ana.")
        assert remembered() == ["Noted, Ana.", "my sister is called Ana"]
        erased = api.delete(
            memories_url("acme", "alice"), {"confirm": "erase user alice"}, format="json"
        )
        assert erased.status_code == 200
        turn("I like chess", "Chess it is.")
        assert remembered() == ["Chess it is.", "I like chess"]
        assert api.delete(f"{memories_url('acme', 'alice')}?session_id=auto").status_code == 200
        turn("I moved to Porto", "Porto is lovely.")
        assert remembered() == ["I moved to Porto", "Porto is lovely."]
        # An explicit admission is the client's own request: it may ingest everything again.
        admit(api, "acme", "alice", "auto")
        worker.drain()
        assert len(remembered()) == 6

    def test_off_by_default(self, api, django_capture_on_commit_callbacks):
        api.post(sessions_url("acme"), {"session_id": "manual"}, format="json")
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            api.post(
                f"{sessions_url('acme')}/manual/events",
                {"event": text("agent", "Done.", turn_complete=True)},
                format="json",
            )
        assert callbacks == []  # nothing admitted, nothing published
        assert OutboxJob.objects.count() == 0
        policy = api.get("/api/v1/apps/acme/memory-policy").json()
        assert policy["ingestion"] == "off"
        bad = api.put("/api/v1/apps/acme/memory-policy", {"ingestion": "always"}, format="json")
        assert bad.status_code == 400


def test_secret_text_redaction():
    from ctxadmin.pruning import looks_like_secret, redact_secret_text

    redacted = redact_secret_text(SECRET)
    assert "sk-outbox" not in redacted and not looks_like_secret(redacted)
    block = "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nbye"
    assert redact_secret_text(block) == "key:\n[redacted]\nbye"
    assert redact_secret_text("-----BEGIN PRIVATE KEY-----\nMIIE") == "[redacted]"


@pytest.mark.django_db
class TestIndexesAndMetrics:
    def plan(self, sql: str, params=None) -> str:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
            return "\n".join(row[0] for row in cursor.fetchall())

    def test_claiming_and_pruning_read_their_partial_indexes(self):
        assert "outbox_claimable" in self.plan(leases.CLAIM_NEXT_SQL)
        assert "outbox_terminal" in self.plan(operations.PRUNE_SQL, [timedelta(days=7), 1000])

    def test_counters_follow_admissions_and_endings(self, api):
        from prometheus_client import REGISTRY

        def value(name, **labels):
            return REGISTRY.get_sample_value(name, labels) or 0.0

        before = (
            value("ctxadmin_outbox_admissions_total", outcome="admitted"),
            value("ctxadmin_outbox_admissions_total", outcome="deduplicated"),
            value("ctxadmin_outbox_jobs_ended_total", phase="completed", code=""),
            value("ctxadmin_outbox_events_total", fate="added"),
        )
        session_with_events(api, "acme", "alice", "m", 3)
        admit(api, "acme", "alice", "m")
        admit(api, "acme", "alice", "m", status=200)
        worker.drain()
        after = (
            value("ctxadmin_outbox_admissions_total", outcome="admitted"),
            value("ctxadmin_outbox_admissions_total", outcome="deduplicated"),
            value("ctxadmin_outbox_jobs_ended_total", phase="completed", code=""),
            value("ctxadmin_outbox_events_total", fate="added"),
        )
        assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1, 3]
