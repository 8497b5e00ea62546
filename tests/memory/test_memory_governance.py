"""Memory governance: erasure (entry, session, user) with receipts and epochs, legal holds,
consent, time to live and retention, and the app's policy."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timedelta

import pytest
from django.db import DatabaseError, connections
from django.utils import timezone

from ctxadmin.canonical import fingerprint
from ctxadmin.errors import ServiceError
from ctxadmin.services import create_api_key
from memory import entries, erasure, governance, inputs, new_memory, tasks
from memory import search as memory_search
from memory.models import Consent, ErasureEpoch, ErasureReceipt, MemoryEntry
from tests.conftest import make_tenant


def url(app: str = "acme", user: str = "alice") -> str:
    return f"/api/v1/apps/{app}/users/{user}/memories"


def add(client, status=201, app="acme", user="alice", **body):
    result = client.post(url(app, user), body, format="json")
    assert result.status_code == status, result.content
    return result.json()


def search_ids(client, query, app="acme", user="alice", status=200):
    result = client.post(f"{url(app, user)}/search", {"query": query}, format="json")
    assert result.status_code == status, result.content
    return {hit["id"] for hit in result.json()["hits"]} if status == 200 else result.json()


def erase_user(client, app="acme", user="alice", confirm=None):
    body = {"confirm": f"erase user {user}" if confirm is None else confirm}
    return client.delete(url(app, user), body, format="json")


def put_policy(client, app="acme", status=200, **policy):
    result = client.put(f"/api/v1/apps/{app}/memory-policy", policy, format="json")
    assert result.status_code == status, result.content
    return result.json()


@pytest.fixture
def api(owner):
    return owner.client()


def key_prefix(tenant) -> str:
    return tenant.app.api_keys.get().prefix


@pytest.mark.django_db
class TestSessionErasure:
    def test_erases_the_session_then_404_with_a_content_free_receipt(self, api, owner):
        in_session = [
            add(api, content=f"Alice's secret plan {i}", provenance={"session_id": "s1"})["id"]
            for i in range(2)
        ]
        other_session = add(api, content="plan in s2", provenance={"session_id": "s2"})["id"]
        no_session = add(api, content="plan without a session")["id"]

        result = api.delete(f"{url()}?session_id=s1")
        assert result.status_code == 200, result.content
        receipt = result.json()
        assert receipt["kind"] == "session"
        assert receipt["counts"] == {"entries": 2, "queued_work": 0, "consent_records": 0}
        assert receipt["erased_by"] == key_prefix(owner)
        assert receipt["scope_fingerprint"] == fingerprint(
            {"app_id": owner.app.pk, "user_id": "alice"}
        )
        assert receipt["target_fingerprint"] == fingerprint(
            {"app_id": owner.app.pk, "user_id": "alice", "session_id": "s1"}
        )
        assert receipt["erasure_epoch"] == 0  # only user erasure advances it
        stored = json.dumps(list(ErasureReceipt.objects.values()), default=str)
        for text in (json.dumps(receipt), stored):
            assert "alice" not in text and "plan" not in text and '"s1"' not in text
        for entry_id in in_session:
            assert api.get(f"{url()}/{entry_id}").status_code == 404
        for entry_id in (other_session, no_session):
            assert api.get(f"{url()}/{entry_id}").status_code == 200

        again = api.delete(f"{url()}?session_id=s1")
        assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"
        assert ErasureReceipt.objects.count() == 1

    @pytest.mark.parametrize(
        ("query", "body", "field"),
        [
            ("session_id=../x", None, "session_id"),
            ("session_id=s1", {"confirm": "erase user alice"}, "body"),
        ],
    )
    def test_bad_requests(self, api, query, body, field):
        add(api, content="x", provenance={"session_id": "s1"})
        result = api.delete(f"{url()}?{query}", body, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == field
        assert MemoryEntry.objects.count() == 1

    def test_a_repeated_session_is_refused_by_the_one_rule(self, api):
        add(api, content="x", provenance={"session_id": "a"})
        result = api.delete(f"{url()}?session_id=a&session_id=b")
        assert result.status_code == 400
        error = result.json()["error"]
        assert (error["code"], error["details"]) == (
            "invalid_parameter",
            {"parameter": "session_id"},
        )
        assert MemoryEntry.objects.count() == 1

    def test_add_takes_no_query_parameter(self, api):
        result = api.post(f"{url()}?session_id=s1", {"content": "x"}, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["code"] == "unknown_parameter"


@pytest.mark.django_db
class TestUserErasure:
    @pytest.mark.parametrize(
        "body",
        [
            None,
            {},
            {"confirm": "erase user bob"},
            {"confirm": "erase user alice "},
            {"confirm": True},
        ],
    )
    def test_confirmation_is_required(self, api, body):
        add(api, content="likes tea")
        result = api.delete(url(), body, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == "confirm"
        assert MemoryEntry.objects.count() == 1

    def test_unknown_field(self, api):
        add(api, content="likes tea")
        body = {"confirm": "erase user alice", "force": True}
        result = api.delete(url(), body, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == "force"

    def test_erases_only_this_user_of_this_app(self, api, owner, outsider):
        mine = [add(api, content=f"Alice visits Lisbon {i}")["id"] for i in range(3)]
        bob = add(api, user="bob", content="Bob visits Lisbon")["id"]
        other_app = add(outsider.client(), app="globex", content="Alice visits Lisbon")["id"]
        api.put(f"{url()}/consent", {"granted": True}, format="json")

        result = erase_user(api)
        assert result.status_code == 200, result.content
        receipt = result.json()
        assert receipt["kind"] == "user" and receipt["target_fingerprint"] is None
        assert receipt["counts"] == {
            "entries": 3,
            "queued_work": 0,
            "consent_records": 1,
            "tokens_revoked": 0,
            "user_state_keys": 0,
            "user_artifacts": 0,
        }
        assert receipt["erasure_epoch"] == 1
        assert "alice" not in json.dumps(receipt) and "Lisbon" not in json.dumps(receipt)
        assert not MemoryEntry.objects.filter(app=owner.app, user_id="alice").exists()
        assert not Consent.objects.filter(app=owner.app, user_id="alice").exists()
        epoch_row = ErasureEpoch.objects.get()
        assert epoch_row.scope_fingerprint == receipt["scope_fingerprint"]
        assert epoch_row.epoch == 1
        for entry_id in mine:
            assert api.get(f"{url()}/{entry_id}").status_code == 404

        assert search_ids(api, "Lisbon", user="bob") == {bob}
        assert api.get(f"{url(user='bob')}/{bob}").status_code == 200
        globex = outsider.client()
        assert search_ids(globex, "Lisbon", app="globex") == {other_app}
        assert globex.get(f"{url('globex')}/{other_app}").status_code == 200
        assert api.get(f"{url()}/erasure-epoch").json() == {"erasure_epoch": 1}
        assert api.get(f"{url(user='bob')}/erasure-epoch").json() == {"erasure_epoch": 0}

        # A retried erasure finds nothing left: 200 and a receipt of zero counts, the epoch
        # where the erasure left it.
        again = erase_user(api)
        assert again.status_code == 200, again.content
        assert again.json()["counts"] == {
            "entries": 0,
            "queued_work": 0,
            "consent_records": 0,
            "tokens_revoked": 0,
            "user_state_keys": 0,
            "user_artifacts": 0,
        }
        assert again.json()["erasure_epoch"] == 1
        assert api.get(f"{url()}/erasure-epoch").json() == {"erasure_epoch": 1}
        assert ErasureReceipt.objects.filter(kind="user").count() == 2
        never = erase_user(api, user="nobody-ever")
        assert never.status_code == 200 and never.json()["erasure_epoch"] == 0

    def test_entry_deletion_keeps_a_receipt(self, api, owner):
        entry = add(api, content="one thing")
        assert api.delete(f"{url()}/{entry['id']}").status_code == 204
        receipt = ErasureReceipt.objects.get()
        assert receipt.kind == "entry" and receipt.counts["entries"] == 1
        assert receipt.erased_by == key_prefix(owner)
        assert api.delete(f"{url()}/{entry['id']}").status_code == 404
        assert ErasureReceipt.objects.count() == 1


@pytest.mark.django_db
class TestErasureEpoch:
    def test_a_stale_write_is_refused_and_writes_nothing(self, api, owner):
        assert api.get(f"{url()}/erasure-epoch").json() == {"erasure_epoch": 0}
        add(api, content="before", erasure_epoch=0)
        assert erase_user(api).status_code == 200

        stale = add(api, status=409, content="queued before the erasure", erasure_epoch=0)
        assert stale["error"]["code"] == "memory_erasure_epoch_stale"
        assert stale["error"]["details"] == {"erasure_epoch": 0, "current_erasure_epoch": 1}
        stale_keyed = add(
            api, status=409, content="queued", erasure_epoch=0, idempotency_key="session:s:e1"
        )
        assert stale_keyed["error"]["code"] == "memory_erasure_epoch_stale"
        assert MemoryEntry.objects.count() == 0

        new = new_memory.parse_new_memory({"content": "queued in the service"})
        with pytest.raises(ServiceError) as caught:
            entries.add_memory(owner.app, "alice", new, epoch=0)
        assert caught.value.code == "memory_erasure_epoch_stale"
        assert caught.value.status_code == 409
        assert MemoryEntry.objects.count() == 0

        add(api, content="after", erasure_epoch=1)
        add(api, content="without an epoch")
        _entry, created = entries.add_memory(owner.app, "alice", new, epoch=1)
        assert created and MemoryEntry.objects.count() == 3

    @pytest.mark.parametrize("epoch", [-1, True, "1", 1.5, 7])
    def test_bad_epochs(self, api, epoch):
        result = api.post(url(), {"content": "x", "erasure_epoch": epoch}, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == "erasure_epoch"
        assert MemoryEntry.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_write_racing_a_user_erasure_waits_for_it_and_is_refused(monkeypatch):
    """The write read epoch 0 before the erasure committed; it waits on the scope's lock
    and, once the erasure commits, is refused. The queued-work hook runs inside the
    erasure and its count is on the receipt."""
    tenant = make_tenant("acme")
    add(tenant.client(), content="before")
    inside, release = threading.Event(), threading.Event()

    def queued_eraser(app, user_id, session_id):
        inside.set()
        assert release.wait(10)
        return 4

    monkeypatch.setattr(erasure, "_QUEUED_WORK_ERASERS", [])
    erasure.register_queued_work_eraser(queued_eraser)
    results: dict[str, object] = {}

    def run(name, call):
        try:
            results[name] = call()
        finally:
            connections.close_all()

    eraser = threading.Thread(target=run, args=("erase", lambda: erase_user(tenant.client())))
    eraser.start()
    assert inside.wait(10)
    writer = threading.Thread(
        target=run,
        args=(
            "write",
            lambda: tenant.client().post(
                url(), {"content": "in flight", "erasure_epoch": 0}, format="json"
            ),
        ),
    )
    writer.start()
    time.sleep(0.5)
    assert writer.is_alive()  # waiting for the erasure
    release.set()
    eraser.join(10)
    writer.join(10)
    receipt = results["erase"].json()
    assert receipt["counts"] == {
        "entries": 1,
        "queued_work": 4,
        "consent_records": 0,
        "tokens_revoked": 0,
        "user_state_keys": 0,
        "user_artifacts": 0,
    }
    assert results["write"].status_code == 409
    assert results["write"].json()["error"]["code"] == "memory_erasure_epoch_stale"
    assert MemoryEntry.objects.count() == 0


@pytest.mark.django_db
class TestLegalHold:
    def test_an_app_hold_blocks_every_erasure(self, api):
        entry = add(api, content="evidence", provenance={"session_id": "s1"})
        put_policy(api, legal_hold=True)
        for result in (
            api.delete(f"{url()}/{entry['id']}"),
            api.delete(f"{url()}?session_id=s1"),
            erase_user(api),
        ):
            assert result.status_code == 409, result.content
            assert result.json()["error"]["code"] == "legal_hold"
            assert result.json()["error"]["details"] == {"hold": "app"}
        assert MemoryEntry.objects.count() == 1
        assert ErasureReceipt.objects.count() == 0
        put_policy(api, legal_hold=False)
        assert erase_user(api).status_code == 200

    def test_a_user_hold_blocks_that_user_only(self, api):
        entry = add(api, content="evidence")
        add(api, user="bob", content="bob's")
        hold = api.put(f"{url()}/legal-hold", format="json")
        assert hold.status_code == 200, hold.content
        assert hold.json()["legal_hold"] is True and hold.json()["app_legal_hold"] is False
        assert api.put(f"{url()}/legal-hold", {}, format="json").json() == hold.json()
        assert api.put(f"{url()}/legal-hold", {"x": 1}, format="json").status_code == 400
        for result in (api.delete(f"{url()}/{entry['id']}"), erase_user(api)):
            assert result.status_code == 409
            assert result.json()["error"]["code"] == "legal_hold"
        assert erase_user(api, user="bob").status_code == 200

        assert api.delete(f"{url()}/legal-hold").status_code == 204
        assert api.delete(f"{url()}/legal-hold").status_code == 404
        assert api.get(f"{url()}/legal-hold").json()["legal_hold"] is False
        assert api.delete(f"{url()}/{entry['id']}").status_code == 204

    def test_policy_and_holds_need_the_admin_scope(self, owner):
        _key, raw = create_api_key(owner.app, ["memory"], name="memory only")
        limited = owner.client(raw)
        assert limited.get("/api/v1/apps/acme/memory-policy").status_code == 200
        put = limited.put("/api/v1/apps/acme/memory-policy", {}, format="json")
        assert put.status_code == 403
        assert limited.put(f"{url()}/legal-hold").status_code == 403
        assert limited.delete(f"{url()}/legal-hold").status_code == 403
        assert limited.get(f"{url()}/legal-hold").status_code == 200
        consent = limited.put(f"{url()}/consent", {"granted": True}, format="json")
        assert consent.status_code == 200


@pytest.mark.django_db
class TestConsent:
    def test_without_consent_nothing_is_written_or_recalled(self, api):
        add(api, content="Alice likes tea")
        put_policy(api, consent_required=True)
        assert api.get(f"{url()}/consent").json() == {
            "granted": None,
            "consent_required": True,
            "updated_at": None,
        }
        refused = add(api, status=403, content="Alice likes coffee")
        assert refused["error"]["code"] == "consent_required"
        assert refused["error"]["details"] == {"reason": "not_recorded"}
        assert search_ids(api, "tea", status=403)["error"]["code"] == "consent_required"
        events = api.post(
            f"{url()}/events",
            {
                "session_id": "s1",
                "events": [
                    {
                        "event_id": "e1",
                        "author": "user",
                        "content": {"role": "user", "parts": [{"text": "I like coffee"}]},
                    }
                ],
            },
            format="json",
        )
        assert events.status_code == 403
        assert MemoryEntry.objects.count() == 1

        granted = api.put(f"{url()}/consent", {"granted": True}, format="json").json()
        assert granted["granted"] is True and granted["updated_at"]
        add(api, content="Alice likes coffee")
        assert len(search_ids(api, "likes tea coffee")) == 2

        api.put(f"{url()}/consent", {"granted": False}, format="json")
        refused = add(api, status=403, content="Alice likes cocoa")
        assert refused["error"]["details"] == {"reason": "not_granted"}
        # Other users are unaffected by Alice's consent, and need their own.
        assert add(api, user="bob", status=403, content="x")["error"]["code"] == (
            "consent_required"
        )

    @pytest.mark.parametrize(
        ("body", "field"),
        [({}, "granted"), ({"granted": "yes"}, "granted"), ({"granted": True, "x": 1}, "x")],
    )
    def test_bad_consent(self, api, body, field):
        result = api.put(f"{url()}/consent", body, format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == field

    def test_an_unreadable_policy_refuses(self, api, monkeypatch):
        add(api, content="Alice likes tea")

        def broken(app, user_id):
            raise DatabaseError("policy table unreadable")

        monkeypatch.setattr(governance, "_read_terms", broken)
        assert add(api, status=403, content="x")["error"]["details"] == {
            "reason": "policy_unavailable"
        }
        assert search_ids(api, "tea", status=403)["error"]["code"] == "consent_required"


@pytest.mark.django_db
class TestExpiry:
    def test_ttl_is_stamped_and_expiry_is_immediate_then_purged(self, api, owner):
        put_policy(api, default_ttl_seconds=3600)
        entry = add(api, content="Alice is in Lisbon this week")
        expires = datetime.fromisoformat(entry["expires_at"])
        assert abs(expires - (timezone.now() + timedelta(hours=1))) < timedelta(minutes=1)
        put_policy(api)
        keep = add(api, content="Alice lives in Lisbon")
        assert keep["expires_at"] is None

        MemoryEntry.objects.filter(id=entry["id"]).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
        assert api.get(f"{url()}/{entry['id']}").status_code == 404
        assert search_ids(api, "Lisbon") == {keep["id"]}
        request = inputs.parse_search({"query": "Lisbon", "mode": "vector"})
        assert {hit["id"] for hit in memory_search.search(owner.app, "alice", request)} == {
            keep["id"]
        }
        assert MemoryEntry.objects.filter(id=entry["id"]).exists()

        assert tasks.purge_expired() == 1
        assert not MemoryEntry.objects.filter(id=entry["id"]).exists()
        assert MemoryEntry.objects.filter(id=keep["id"]).exists()
        assert tasks.purge_expired() == 0

    def test_the_purge_spares_retained_and_held_entries(self, api, owner):
        past = timezone.now() - timedelta(seconds=1)
        retained = add(api, content="retained")["id"]
        held = add(api, user="held", content="held")["id"]
        gone = add(api, user="bob", content="gone")["id"]
        MemoryEntry.objects.update(expires_at=past)
        MemoryEntry.objects.filter(id=retained).update(
            retain_until=timezone.now() + timedelta(days=1)
        )
        api.put(f"{url(user='held')}/legal-hold")
        assert tasks.purge_expired() == 1
        assert set(MemoryEntry.objects.values_list("id", flat=True)) == {
            uuid.UUID(retained),
            uuid.UUID(held),
        }
        assert not MemoryEntry.objects.filter(id=gone).exists()

    def test_the_purge_runs_in_bounded_batches(self, api, monkeypatch):
        for i in range(7):
            add(api, content=f"note {i}")
        MemoryEntry.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        monkeypatch.setattr(governance, "PURGE_BATCH_SIZE", 2)
        monkeypatch.setattr(tasks, "MAX_PURGE_BATCHES_PER_RUN", 3)
        calls = []
        batch = governance.purge_expired_batch

        def counted(batch_size=None):
            calls.append(1)
            return batch(2)

        monkeypatch.setattr(governance, "purge_expired_batch", counted)
        assert tasks.purge_expired() == 6 and len(calls) == 3
        assert tasks.purge_expired() == 1
        assert MemoryEntry.objects.count() == 0

    def test_an_expired_entry_frees_its_idempotency_key(self, api):
        first = add(api, content="old", idempotency_key="k1")
        MemoryEntry.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
        second = add(api, content="new", idempotency_key="k1")
        assert second["id"] != first["id"] and MemoryEntry.objects.count() == 1

    def test_the_beat_purges(self):
        from config.celery import BEAT_SCHEDULE

        assert BEAT_SCHEDULE["purge-expired-memories"]["task"] == "memory.purge_expired"


@pytest.mark.django_db
class TestRetention:
    def test_entry_and_session_erasure_wait_user_erasure_does_not(self, api):
        put_policy(api, retention_days=30)
        entry = add(api, content="kept for a month", provenance={"session_id": "s1"})
        assert entry["retain_until"] is not None
        for result in (api.delete(f"{url()}/{entry['id']}"), api.delete(f"{url()}?session_id=s1")):
            assert result.status_code == 409
            error = result.json()["error"]
            assert error["code"] == "memory_retained" and error["details"]["retained"] == 1
        assert erase_user(api).status_code == 200
        assert MemoryEntry.objects.count() == 0


@pytest.mark.django_db
class TestPolicy:
    def test_defaults_then_put_then_get(self, api):
        assert api.get("/api/v1/apps/acme/memory-policy").json() == {
            "consent_required": False,
            "default_ttl_seconds": None,
            "retention_days": None,
            "legal_hold": False,
            "ingestion": "off",
            "extractor": {"kind": "none"},
            "source": "default",
            "updated_at": None,
        }
        state = put_policy(api, consent_required=True, default_ttl_seconds=86400 * 60)
        assert state["source"] == "app" and state["updated_at"]
        assert state["default_ttl_seconds"] == 86400 * 60 and state["retention_days"] is None
        assert api.get("/api/v1/apps/acme/memory-policy").json() == state
        # PUT replaces the policy whole.
        assert put_policy(api, retention_days=7)["default_ttl_seconds"] is None

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"consent": True}, "consent"),
            ({"consent_required": "yes"}, "consent_required"),
            ({"consent_required": None}, "consent_required"),
            ({"legal_hold": 1}, "legal_hold"),
            ({"ingestion": "sometimes"}, "ingestion"),
            ({"ingestion": None}, "ingestion"),
            ({"extractor": None}, "extractor"),
            ({"extractor": {"kind": "llm"}}, "extractor.kind"),
            ({"default_ttl_seconds": 0}, "default_ttl_seconds"),
            ({"default_ttl_seconds": -5}, "default_ttl_seconds"),
            ({"default_ttl_seconds": True}, "default_ttl_seconds"),
            ({"default_ttl_seconds": "60"}, "default_ttl_seconds"),
            ({"default_ttl_seconds": 1.5}, "default_ttl_seconds"),
            ({"default_ttl_seconds": 10**12}, "default_ttl_seconds"),
            ({"retention_days": 0}, "retention_days"),
            ({"retention_days": 10**9}, "retention_days"),
            ({"retention_days": 2, "default_ttl_seconds": 86400}, "default_ttl_seconds"),
        ],
    )
    def test_strict_validation(self, api, body, field):
        error = put_policy(api, status=400, **body)["error"]
        assert error["code"] == "validation_error"
        assert error["details"]["field"] == field
        assert field in error["message"]
        assert api.get("/api/v1/apps/acme/memory-policy").json()["source"] == "default"

    def test_a_body_that_is_not_an_object(self, api):
        result = api.put("/api/v1/apps/acme/memory-policy", [1], format="json")
        assert result.status_code == 400
        assert result.json()["error"]["details"]["field"] == "body"

    def test_policies_are_per_app(self, api, outsider):
        put_policy(api, consent_required=True)
        add(outsider.client(), app="globex", content="no consent needed here")
        assert add(api, status=403, content="x")["error"]["code"] == "consent_required"
