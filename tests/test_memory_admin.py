"""The memory pages of the operator console: ids, counts, bytes, fingerprints and times,
never a memory's content, metadata or idempotency key; nothing there adds, edits or
deletes, and the entry list reads none of the heavy columns and a bounded number of rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ctxadmin.admin import CappedCountPaginator
from memory.models import (
    Consent,
    ErasureEpoch,
    ErasureReceipt,
    LegalHold,
    MemoryEntry,
    MemoryPolicy,
)
from memory.scope import scope_fingerprint
from tests.conftest import make_operator

ENTRIES = "/admin/memory/memoryentry/"
# Words only the memories (content, metadata, keys) hold.
CONTENT = "zanzibar quokka manifest"
METADATA = "okapi-ledger-value"
IDEMPOTENCY_KEY = "narwhal-receipt-key"
OTHER_CONTENT = "globex pangolin itinerary"
PLURAL = MemoryEntry._meta.verbose_name_plural
PRIVATE = [w.encode() for w in (CONTENT, METADATA, IDEMPOTENCY_KEY, OTHER_CONTENT)]


@pytest.fixture
def operator(db, client):
    # Every permission but ctxadmin.view_content: the pages must show no content.
    user = make_operator()
    client.force_login(user)
    client.user = user
    return client


def add_memory(tenant, user="alice", **body) -> MemoryEntry:
    result = tenant.client().post(
        f"/api/v1/apps/{tenant.app.name}/users/{user}/memories", body, format="json"
    )
    assert result.status_code == 201, result.content
    return MemoryEntry.objects.get(pk=result.json()["id"])


@pytest.fixture
def entry(owner, outsider) -> MemoryEntry:
    """acme/alice's memory holding the private words, beside globex's own."""
    add_memory(outsider, user="bob", content=OTHER_CONTENT, metadata={"trip": OTHER_CONTENT})
    row = add_memory(
        owner,
        content=f"remember the {CONTENT}",
        metadata={"topic": METADATA},
        idempotency_key=IDEMPOTENCY_KEY,
        provenance={"session_id": "s1", "event_id": "e1"},
    )
    # The test means something: the private words are stored on the entry.
    assert CONTENT in row.content and row.metadata == {"topic": METADATA}
    assert row.idempotency_key == IDEMPOTENCY_KEY and row.embedding is not None
    return row


def assert_private_words_absent(page: bytes) -> None:
    for word in PRIVATE:
        assert word not in page, word


def test_entry_pages_show_ids_and_numbers_not_content(operator, entry):
    listed = operator.get(ENTRIES)
    assert listed.status_code == 200
    assert str(entry.pk).encode() in listed.content
    assert b"acme" in listed.content and b"globex" in listed.content
    assert entry.embedding_model.encode() in listed.content
    assert_private_words_absent(listed.content)

    shown = operator.get(f"{ENTRIES}{entry.pk}/change/")
    assert shown.status_code == 200
    for expected in (
        str(entry.pk),
        "alice",
        str(entry.content_bytes),
        entry.content_sha256,
        scope_fingerprint(entry.app, "alice"),
        "s1",
        "e1",
    ):
        assert expected.encode() in shown.content, expected
    assert_private_words_absent(shown.content)


def test_entries_are_found_by_id_and_filtered_without_content(operator, entry):
    other = MemoryEntry.objects.exclude(pk=entry.pk).get()
    for query, present, absent in (
        (f"?q={entry.pk}", entry, other),
        (f"?app__id__exact={entry.app_id}", entry, other),
        ("?embedded=yes&embedding_model=configured", entry, None),
    ):
        shown = operator.get(f"{ENTRIES}{query}")
        assert shown.status_code == 200, query
        assert str(present.pk).encode() in shown.content, query
        if absent is not None:
            assert str(absent.pk).encode() not in shown.content, query
        assert_private_words_absent(shown.content)
    for query in (f"?q={CONTENT.split()[0]}", "?q=alice", "?embedded=no", "?embedding_model=other"):
        shown = operator.get(f"{ENTRIES}{query}")
        assert shown.status_code == 200, query
        assert str(entry.pk).encode() not in shown.content, query
        assert f"0 {PLURAL}".encode() in shown.content, query


def test_the_entry_list_reads_no_content_and_a_bounded_number_of_queries(
    operator, owner, entry, django_assert_max_num_queries
):
    def listed_queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert operator.get(ENTRIES).status_code == 200
        return [query["sql"] for query in captured.captured_queries]

    few = listed_queries()
    for n in range(12):
        add_memory(owner, user=f"u{n}", content=f"another {CONTENT} {n}")
    many = listed_queries()
    assert len(many) == len(few)
    # Session, user, the user's and groups' permissions, the page: no query per row.
    with django_assert_max_num_queries(7):
        operator.get(ENTRIES)
    for page in (ENTRIES, f"{ENTRIES}{entry.pk}/change/"):
        with CaptureQueriesContext(connection) as captured:
            assert operator.get(page).status_code == 200
        entry_sql = [
            q["sql"] for q in captured.captured_queries if "memory_memoryentry" in q["sql"]
        ]
        assert entry_sql, page
        for sql in entry_sql:
            for column in ("content", "metadata", "idempotency_key", "search"):
                assert f'"memory_memoryentry"."{column}"' not in sql, (column, sql)
            # Whether an entry has a vector is asked; the vector itself is never read.
            assert '"memory_memoryentry"."embedding",' not in sql
            assert '"memory_memoryentry"."embedding" FROM' not in sql
            if "COUNT(" in sql.upper():
                assert "LIMIT" in sql, sql  # counted up to the cap, never the whole table

    model_admin = admin.site._registry[MemoryEntry]
    request = RequestFactory().get(ENTRIES)
    request.user = operator.user
    row = model_admin.get_queryset(request).get(pk=entry.pk)
    assert {"content", "metadata", "idempotency_key", "search", "embedding"} <= (
        row.get_deferred_fields()
    )


def test_the_entry_count_stops_at_its_cap(operator, owner, entry, monkeypatch):
    for n in range(3):
        add_memory(owner, user=f"u{n}", content=f"another {CONTENT} {n}")
    monkeypatch.setattr(CappedCountPaginator, "cap", 2)
    shown = operator.get(ENTRIES)
    assert shown.status_code == 200
    assert f"more than 2 {PLURAL}".encode() in shown.content
    monkeypatch.setattr(CappedCountPaginator, "cap", 10)
    assert f"5 {PLURAL}".encode() in operator.get(ENTRIES).content


@pytest.fixture
def governance(owner, entry):
    """A policy, a consent, a hold, an erasure epoch and a receipt of acme."""
    app = owner.app
    policy = MemoryPolicy.objects.create(app=app, retention_days=4321, updated_by="abcd1234")
    consent = Consent.objects.create(app=app, user_id="alice", granted=True)
    hold = LegalHold.objects.create(app=app, user_id="carol")
    fingerprint = scope_fingerprint(app, "dave")
    epoch = ErasureEpoch.objects.create(app=app, scope_fingerprint=fingerprint, epoch=7)
    receipt = ErasureReceipt.objects.create(
        id="0c4a7b52-3d1e-4f55-9a11-6b1f2e3d4c5b",
        app=app,
        kind=ErasureReceipt.USER,
        scope_fingerprint=fingerprint,
        erased_by="abcd1234",
        counts={"memories": 3},
        erasure_epoch=7,
    )
    return {
        MemoryPolicy: (policy, b"4321"),
        Consent: (consent, b"alice"),
        LegalHold: (hold, b"carol"),
        ErasureEpoch: (epoch, fingerprint.encode()),
        ErasureReceipt: (receipt, fingerprint.encode()),
    }


def test_governance_pages_list_and_show_without_content(operator, governance):
    for model, (row, expected) in governance.items():
        base = f"/admin/memory/{model._meta.model_name}/"
        for page in (base, f"{base}{row.pk}/change/"):
            shown = operator.get(page)
            assert shown.status_code == 200, page
            assert expected in shown.content, page
            assert_private_words_absent(shown.content)
    fingerprint = governance[ErasureEpoch][0].scope_fingerprint
    for model in (ErasureEpoch, ErasureReceipt):
        base = f"/admin/memory/{model._meta.model_name}/"
        link = f"{base}{governance[model][0].pk}/change/".encode()
        assert link in operator.get(f"{base}?q={fingerprint}").content
        assert link not in operator.get(f"{base}?q={fingerprint[:10]}").content


def test_nothing_is_added_edited_or_deleted(operator, entry, governance):
    rows = {MemoryEntry: entry, **{model: row for model, (row, _) in governance.items()}}
    request = RequestFactory().get("/admin/")
    request.user = operator.user
    for model, row in rows.items():
        model_admin = admin.site._registry[model]
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request, row)
        assert not model_admin.has_delete_permission(request, row)
        assert model_admin.has_view_permission(request, row)
        assert "delete_selected" not in model_admin.get_actions(request)
        base = f"/admin/memory/{model._meta.model_name}/"
        assert operator.get(f"{base}add/").status_code == 403
        assert operator.get(f"{base}{row.pk}/delete/").status_code == 403
        assert operator.post(f"{base}{row.pk}/delete/", {"post": "yes"}).status_code == 403
        assert operator.post(f"{base}{row.pk}/change/", {}).status_code == 403
        assert model.objects.filter(pk=row.pk).exists()
    listed = operator.post(ENTRIES, {"action": "delete_selected", "_selected_action": [entry.pk]})
    assert listed.status_code == 403
    entry.refresh_from_db()
    assert CONTENT in entry.content


def test_the_console_index_lists_the_memory_pages(operator, db):
    index = operator.get("/admin/")
    assert index.status_code == 200
    for model in ("memoryentry", "memorypolicy", "consent", "legalhold", "erasureepoch"):
        assert f"/admin/memory/{model}/".encode() in index.content
    assert b"/admin/memory/erasurereceipt/" in index.content


JOBS = "/admin/memory/outboxjob/"


@pytest.fixture
def queued(owner):
    """Two admitted ingestion jobs of acme/alice whose events hold the private words."""
    from tests.outbox_helpers import admit

    client = owner.client()
    ids = []
    for sid in ("s1", "s2"):
        client.post("/api/v1/apps/acme/users/alice/sessions", {"session_id": sid}, format="json")
        client.post(
            f"/api/v1/apps/acme/users/alice/sessions/{sid}/events",
            {
                "event": {
                    "author": "user",
                    "content": {"role": "user", "parts": [{"text": CONTENT}]},
                }
            },
            format="json",
        )
        ids.append(admit(client, "acme", "alice", sid).json()["job_id"])
    return ids


def test_outbox_jobs_are_listed_and_shown_without_their_payload(operator, queued):
    page = operator.get(JOBS)
    assert page.status_code == 200
    assert queued[0].encode() in page.content and b"pending" in page.content
    detail = operator.get(f"{JOBS}{queued[0]}/change/")
    assert detail.status_code == 200
    for private in PRIVATE:
        assert private not in page.content and private not in detail.content
    filtered = operator.get(f"{JOBS}?phase__exact=pending")
    assert filtered.status_code == 200 and queued[1].encode() in filtered.content


def test_outbox_actions_need_the_operate_permission_and_go_through_the_service(
    operator, queued, client
):
    from memory.models import OutboxJob

    later = timezone.now() + timedelta(hours=1)
    OutboxJob.objects.filter(pk=queued[0]).update(phase="retry", due_at=later)
    answer = operator.post(
        JOBS, {"action": "cancel_jobs", "_selected_action": [queued[1]]}, follow=True
    )
    assert answer.status_code == 200
    assert OutboxJob.objects.get(pk=queued[1]).phase == "cancelled"
    assert OutboxJob.objects.get(pk=queued[1]).payload == []
    assert OutboxJob.objects.get(pk=queued[0]).phase == "retry"
    operator.post(JOBS, {"action": "retry_now", "_selected_action": [queued[0]]}, follow=True)
    assert OutboxJob.objects.get(pk=queued[0]).due_at < later  # due now, still waiting
    assert OutboxJob.objects.get(pk=queued[0]).phase == "retry"
    # A staff user without the permission sees no action.
    viewer = get_user_model().objects.create_user("viewer", password="v-pass-123456", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_outboxjob"))
    client.force_login(viewer)
    listing = client.get(JOBS)
    assert listing.status_code == 200 and b"cancel_jobs" not in listing.content
    OutboxJob.objects.filter(pk=queued[0]).update(due_at=later)
    client.post(JOBS, {"action": "cancel_jobs", "_selected_action": [queued[0]]})
    client.post(JOBS, {"action": "retry_now", "_selected_action": [queued[0]]})
    unchanged = OutboxJob.objects.get(pk=queued[0])
    assert unchanged.phase == "retry" and unchanged.due_at == later


def test_entries_the_embedder_gave_up_on_are_listed_as_refused(operator, entry):
    other = MemoryEntry.objects.exclude(pk=entry.pk).get()
    MemoryEntry.objects.filter(pk=other.pk).update(embedding=None, embed_failures=3)
    shown = operator.get(f"{ENTRIES}?embedded=refused")
    assert shown.status_code == 200
    assert str(other.pk).encode() in shown.content
    assert str(entry.pk).encode() not in shown.content
    assert_private_words_absent(shown.content)
