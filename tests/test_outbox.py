"""The durable ingestion outbox, drained in this process: admission (sanitising, dedup),
claiming, leases, epoch fencing, retries and poison jobs. ``test_outbox_operations.py``
holds cancel, erasure, statistics, limits, pruning and the automatic path;
``test_outbox_worker.py`` runs the same machinery in real worker processes, with crashes
and a broker outage."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from memory import scope
from memory.models import OutboxJob
from memory.outbox import admission, worker
from tests.outbox_helpers import (
    admit,
    connection_now,
    job,
    memories_url,
    row,
    scope_entries,
    session_with_events,
    set_due_now,
)
from tests.sessions_helpers import sessions_url, text


@pytest.fixture
def api(owner):
    return owner.client()


@pytest.mark.django_db
class TestAdmissionAndProcessing:
    def test_1001_events_run_in_three_batches_with_the_secret_redacted(self, api, owner):
        session_with_events(api, "acme", "alice", "s1", 1001, secret_at=7)
        admitted = admit(api, "acme", "alice", "s1").json()
        assert admitted["deduplicated"] is False and admitted["phase"] == "pending"
        assert admitted["events"] == 1001 and (admitted["first_seq"], admitted["last_seq"]) == (
            1,
            1001,
        )
        assert admitted["status_url"].endswith(
            f"/api/v1/apps/acme/outbox/jobs/{admitted['job_id']}"
        )
        stored = row(admitted["job_id"])
        assert "sk-outboxSECRET" not in str(stored.payload)  # redacted at admission
        assert stored.redacted == 1

        assert worker.drain() == {"completed": 1}
        status = job(api, "acme", admitted["job_id"])
        assert status["phase"] == "completed" and status["batches"] == 3
        assert status["cursor"] == 1001 and status["attempts"] == 1
        assert status["added"] == 1001 - status["skipped"] and status["skipped"] == 0
        assert status["lease"] is None and status["error"] is None
        entries = scope_entries(owner.app.pk, "alice")
        assert len(entries) == 1001
        assert not any("sk-outboxSECRET" in content for _key, content in entries)
        assert any("[redacted] and I hike on Sundays" in content for _key, content in entries)
        assert row(admitted["job_id"]).payload == []  # nothing kept once ended

        again = admit(api, "acme", "alice", "s1", status=200).json()
        assert again["job_id"] == admitted["job_id"] and again["deduplicated"] is True
        assert again["phase"] == "completed"

    def test_events_that_are_not_memory_are_skipped(self, api, owner):
        api.post(sessions_url("acme"), {"session_id": "mixed"}, format="json")
        events = [
            text("user", "I moved to Lisbon in May", event_id="a"),
            {"author": "agent", "actions": {"state_delta": {"step": 2}}, "event_id": "b"},
            text("user", "   ", event_id="c"),
            {
                "author": "agent",
                "event_id": "d",
                "content": {
                    "role": "model",
                    "parts": [{"function_call": {"id": "c1", "name": "f", "args": {}}}],
                },
            },
            text(
                "user",
                "-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----",
                event_id="e",
            ),
            text("agent", "Lisbon is lovely in spring", event_id="f"),
        ]
        appended = api.post(
            f"{sessions_url('acme')}/mixed/events", {"events": events}, format="json"
        )
        assert appended.status_code == 201, appended.content
        admitted = admit(api, "acme", "alice", "mixed").json()
        worker.drain()
        status = job(api, "acme", admitted["job_id"])
        assert status["added"] == 2 and status["skipped"] == 4
        assert status["skipped_by_reason"] == {"control": 2, "empty": 1, "secret": 1}
        assert sorted(c for _k, c in scope_entries(owner.app.pk, "alice")) == [
            "I moved to Lisbon in May",
            "Lisbon is lovely in spring",
        ]
        found = api.post(
            f"{memories_url('acme', 'alice')}/search", {"query": "Lisbon"}, format="json"
        ).json()
        assert len(found["hits"]) == 2

    def test_after_seq_and_the_synchronous_path_share_idempotency(self, api, owner):
        session_with_events(api, "acme", "alice", "s2", 6)
        first = admit(api, "acme", "alice", "s2", after_seq=4).json()
        assert (first["events"], first["first_seq"]) == (2, 5)
        worker.drain()
        everything = admit(api, "acme", "alice", "s2").json()
        assert everything["job_id"] != first["job_id"]
        worker.drain()
        status = job(api, "acme", everything["job_id"])
        assert (status["added"], status["duplicates"]) == (4, 2)
        assert len(scope_entries(owner.app.pk, "alice")) == 6
        # Nothing after the last event: a clear refusal.
        nothing = admit(api, "acme", "alice", "s2", status=422, after_seq=6).json()
        assert nothing["error"]["code"] == "nothing_to_ingest"

    def test_more_than_5000_events_are_admitted_in_parts(self, api, monkeypatch):
        monkeypatch.setattr(admission, "MAX_JOB_EVENTS", 3)
        session_with_events(api, "acme", "alice", "long", 5)
        first = admit(api, "acme", "alice", "long").json()
        assert first["events"] == 3 and first["more"] is True and first["next_after_seq"] == 3
        rest = admit(api, "acme", "alice", "long", after_seq=first["next_after_seq"]).json()
        assert rest["events"] == 2 and rest["more"] is False and rest["next_after_seq"] is None

    def test_more_than_8_mib_of_events_are_admitted_in_parts(self, api, monkeypatch):
        session_with_events(api, "acme", "alice", "big", 5)
        listed = api.get(f"{sessions_url('acme')}/big/events").json()["results"]
        sizes = [event["byte_size"] for event in listed]
        # Room for two events and a half: the third would pass the bound.
        monkeypatch.setattr(admission, "MAX_JOB_BYTES", sizes[0] + sizes[1] + sizes[2] // 2)
        first = admit(api, "acme", "alice", "big").json()
        assert (first["events"], first["more"], first["next_after_seq"]) == (2, True, 2)
        # A single event over the bound still makes a job of its own.
        monkeypatch.setattr(admission, "MAX_JOB_BYTES", 1)
        alone = admit(api, "acme", "alice", "big", after_seq=2).json()
        assert (alone["events"], alone["more"], alone["next_after_seq"]) == (1, True, 3)

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"session_id": "s", "extra": 1}, "extra"),
            ({}, "session_id"),
            ({"session_id": "../x"}, "session_id"),
            ({"session_id": "s", "after_seq": -1}, "after_seq"),
            ({"session_id": "s", "after_seq": "3"}, "after_seq"),
            ({"session_id": "s", "max_attempts": 0}, "max_attempts"),
            ({"session_id": "s", "max_attempts": 21}, "max_attempts"),
        ],
    )
    def test_bad_requests_are_refused_whole(self, api, body, field):
        result = api.post(f"{memories_url('acme', 'alice')}/ingestions", body, format="json")
        assert result.status_code == 400, result.content
        assert field in result.json()["error"]["message"]
        assert OutboxJob.objects.count() == 0

    def test_scope_and_tenancy(self, api, owner, outsider):
        session_with_events(api, "acme", "alice", "mine", 2)
        # Another user of the same app has no such session; another app cannot see the job.
        assert admit(api, "acme", "bob", "mine", status=404).json()["error"]["code"] == "not_found"
        admitted = admit(api, "acme", "alice", "mine").json()
        stranger = outsider.client()
        assert (
            stranger.get(f"/api/v1/apps/acme/outbox/jobs/{admitted['job_id']}").status_code == 404
        )
        assert (
            stranger.get(f"/api/v1/apps/globex/outbox/jobs/{admitted['job_id']}").status_code == 404
        )
        assert (
            stranger.post(
                f"/api/v1/apps/globex/outbox/jobs/{admitted['job_id']}/cancel"
            ).status_code
            == 404
        )
        assert api.get("/api/v1/apps/acme/outbox/jobs/not-a-uuid").status_code == 404

    def test_consent_is_required_at_admission(self, api, owner):
        session_with_events(api, "acme", "alice", "c", 2)
        assert (
            api.put(
                "/api/v1/apps/acme/memory-policy", {"consent_required": True}, format="json"
            ).status_code
            == 200
        )
        refused = admit(api, "acme", "alice", "c", status=403).json()
        assert refused["error"]["code"] == "consent_required"
        assert OutboxJob.objects.count() == 0

    def test_consent_revoked_before_the_worker_fails_the_job_without_retrying(self, api, owner):
        session_with_events(api, "acme", "alice", "c", 2)
        admitted = admit(api, "acme", "alice", "c").json()
        api.put("/api/v1/apps/acme/memory-policy", {"consent_required": True}, format="json")
        worker.drain()
        status = job(api, "acme", admitted["job_id"])
        assert status["phase"] == "failed" and status["attempts"] == 1
        assert status["error"]["code"] == "consent_required"
        assert scope_entries(owner.app.pk, "alice") == []

    def test_status_is_content_free(self, api):
        session_with_events(api, "acme", "alice", "quiet", 3, secret_at=1)
        admitted = admit(api, "acme", "alice", "quiet").json()
        worker.drain()
        body = str(job(api, "acme", admitted["job_id"])) + str(
            api.get("/api/v1/apps/acme/outbox/stats").json()
        )
        assert "remembers fact" not in body and "hike" not in body and "sk-outbox" not in body


@pytest.mark.django_db
class TestLeasesEpochsAndFailures:
    def test_a_lost_lease_writes_nothing(self, api, owner):
        session_with_events(api, "acme", "alice", "s", 4)
        admitted = admit(api, "acme", "alice", "s").json()
        claimed = worker.claim()
        assert claimed is not None and str(claimed.job.pk) == admitted["job_id"]
        # The lease expired and another worker claimed the job meanwhile.
        OutboxJob.objects.filter(pk=claimed.job.pk).update(owner_token="f" * 32)
        assert worker.process(claimed) == "lease_lost"
        assert scope_entries(owner.app.pk, "alice") == []
        assert row(admitted["job_id"]).cursor == 0

    def test_a_stale_epoch_cancels_and_writes_nothing(self, api, owner):
        session_with_events(api, "acme", "alice", "s", 4)
        admitted = admit(api, "acme", "alice", "s").json()
        claimed = worker.claim()
        with connection.cursor():
            from django.db import transaction

            with transaction.atomic():
                scope.advance_epoch(owner.app, "alice")  # an erasure, as the worker sees it
        assert worker.process(claimed) == "cancelled"
        status = job(api, "acme", admitted["job_id"])
        assert status["phase"] == "cancelled" and status["error"]["code"] == "stale_epoch"
        assert status["session_id"] is None  # the erased scope's ids are blanked
        assert scope_entries(owner.app.pk, "alice") == []

    def test_failures_back_off_then_fail_with_a_redacted_error(self, api, owner, settings):
        settings.CTXADMIN_MEMORY_MAX_PER_SCOPE = 1  # every batch of 3 overflows the scope
        session_with_events(api, "acme", "alice", "s", 3)
        admitted = admit(api, "acme", "alice", "s", max_attempts=2).json()
        assert worker.drain() == {"retry": 1}
        status = job(api, "acme", admitted["job_id"])
        assert status["phase"] == "retry" and status["attempts"] == 1
        assert status["error"]["code"] == "memory_capacity_exceeded"
        assert status["next_attempt_at"] is not None
        assert worker.drain() == {}  # not due yet
        set_due_now(admitted["job_id"])
        assert worker.drain() == {"failed": 1}
        status = job(api, "acme", admitted["job_id"])
        assert status["phase"] == "failed" and status["attempts"] == 2
        assert status["finished_at"] is not None and row(admitted["job_id"]).payload == []
        # Room again: admitting the same events starts the failed job afresh.
        settings.CTXADMIN_MEMORY_MAX_PER_SCOPE = 100
        again = admit(api, "acme", "alice", "s").json()
        assert again["job_id"] == admitted["job_id"] and again["deduplicated"] is False
        assert again["phase"] == "pending"
        assert worker.drain() == {"completed": 1}
        status = job(api, "acme", admitted["job_id"])
        assert (status["attempts"], status["added"], status["error"]) == (1, 3, None)

    def test_backoff_grows_exponentially_with_jitter_and_a_ceiling(self, settings):
        settings.CTXADMIN_OUTBOX_BACKOFF_SECONDS = 2
        settings.CTXADMIN_OUTBOX_BACKOFF_MAX_SECONDS = 30
        for attempt, full in [(1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (12, 30)]:
            draws = [worker.backoff_seconds(attempt) for _ in range(200)]
            assert all(full / 2 <= d <= full for d in draws)
            assert len(set(draws)) > 1  # jittered

    def test_a_job_that_kills_its_workers_fails_and_never_blocks_others(self, api, owner):
        session_with_events(api, "acme", "alice", "poison", 2)
        session_with_events(api, "acme", "alice", "fine", 2)
        poison = admit(api, "acme", "alice", "poison", max_attempts=2).json()
        fine = admit(api, "acme", "alice", "fine").json()
        for _ in range(2):  # two workers died holding it
            claimed = worker.claim(prefer=poison["job_id"])
            assert str(claimed.job.pk) == poison["job_id"]
            set_due_now(poison["job_id"])  # its lease expires
        # The next claim fails the poison job and goes on to the other one.
        claimed = worker.claim()
        assert str(claimed.job.pk) == fine["job_id"]
        assert worker.process(claimed) == "completed"
        status = job(api, "acme", poison["job_id"])
        assert status["phase"] == "failed" and status["error"]["code"] == "worker_lost"
        assert status["attempts"] == 2

    def test_claims_go_by_due_time(self, api):
        session_with_events(api, "acme", "alice", "later", 1)
        session_with_events(api, "acme", "alice", "now", 1)
        later = admit(api, "acme", "alice", "later").json()
        now = admit(api, "acme", "alice", "now").json()
        OutboxJob.objects.filter(pk=later["job_id"]).update(
            phase="retry", due_at=connection_now() + timedelta(minutes=5)
        )
        assert str(worker.claim().job.pk) == now["job_id"]
        assert worker.claim() is None  # the retry is not due; the other is leased

    def test_an_expired_lease_is_claimed_again_and_resumes_from_the_cursor(
        self, api, owner, monkeypatch
    ):
        monkeypatch.setattr(worker, "BATCH_EVENTS", 2)
        session_with_events(api, "acme", "alice", "s", 5)
        admitted = admit(api, "acme", "alice", "s").json()
        claimed = worker.claim()
        # The worker writes one batch, then its process dies before the next.
        real_embedded = worker._embedded
        calls = []

        def embedded_then_die(items):
            calls.append(len(items))
            if len(calls) == 2:
                raise SystemExit("worker died")
            return real_embedded(items)

        monkeypatch.setattr(worker, "_embedded", embedded_then_die)
        with pytest.raises(SystemExit):
            worker.process(claimed)
        monkeypatch.setattr(worker, "_embedded", real_embedded)
        assert row(admitted["job_id"]).phase == "running"
        assert worker.claim() is None  # leased still
        set_due_now(admitted["job_id"])
        again = worker.claim()
        assert again.job.cursor == 2 and again.job.attempts == 2
        assert worker.process(again) == "completed"
        status = job(api, "acme", admitted["job_id"])
        assert (status["added"], status["duplicates"], status["batches"]) == (5, 0, 3)
        assert len(scope_entries(owner.app.pk, "alice")) == 5
