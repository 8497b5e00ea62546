"""The prefix-cache registry with the in-process ``fake`` provider: single flight within a
process, limits, bypasses, deadlines and orphans, TTLs, invalidation, leases and cleanup.

Cross-process single flight and the Gemini wire format are in ``test_cache_single_flight``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from caching import crypto, registry
from caching.models import CacheEntry, CacheScope
from tests.cache_helpers import PREFIX_MARKER, acquire, body, prefix, scope, states
from tests.conftest import make_tenant

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fake")]


@pytest.fixture
def tenant():
    return make_tenant("acme")


def _parallel(app, bodies, workers: int = 24):
    def run(value):
        try:
            return acquire(app, value)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, bodies))


def test_a_miss_creates_and_the_next_acquire_hits(tenant, fake):
    first = acquire(tenant.app, body())
    assert (first.status, first.reason) == ("created", None)
    assert first.lease and first.expires_at and first.cached_tokens
    second = acquire(tenant.app, body())
    assert (second.status, second.waited) == ("hit", False)
    assert second.expires_at == first.expires_at
    assert fake.creates == 1
    assert states(tenant.app) == {"active": 1}
    resolved = registry.resolve(tenant.app, second.lease)
    assert resolved.resource_name in fake.resources
    assert resolved.resource_name not in repr(resolved)


def test_concurrent_misses_in_one_process_share_one_create(tenant, fake, settings):
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 100
    outcomes = _parallel(tenant.app, [body()] * 24)
    assert fake.creates == 1
    assert sorted({o.status for o in outcomes}) == ["created", "hit"]
    assert sum(o.status == "created" for o in outcomes) == 1
    assert sum(o.waited for o in outcomes) >= 1
    assert states(tenant.app) == {"active": 1}
    resources = {registry.resolve(tenant.app, o.lease).resource_name for o in outcomes}
    assert len(resources) == 1


def test_128_callers_over_4_scopes_make_4_creates(tenant, fake, settings):
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 100
    bodies = [body(scope(f"user-{i % 4}")) for i in range(128)]
    outcomes = _parallel(tenant.app, bodies, workers=32)
    assert fake.creates == 4
    assert all(o.status in {"created", "hit"} for o in outcomes)
    assert states(tenant.app) == {"active": 4}
    assert CacheScope.objects.filter(app=tenant.app).count() == 4


def test_the_same_prefix_for_two_users_is_two_entries(tenant, fake):
    a = acquire(tenant.app, body(scope("alice")))
    b = acquire(tenant.app, body(scope("bob")))
    assert (a.status, b.status) == ("created", "created")
    assert a.prefix_fingerprint == b.prefix_fingerprint
    assert a.scope_fingerprint != b.scope_fingerprint
    assert fake.creates == 2 and states(tenant.app) == {"active": 2}


def test_the_same_user_in_two_apps_is_two_entries(fake):
    acme, globex = make_tenant("acme"), make_tenant("globex")
    assert acquire(acme.app, body()).status == "created"
    assert acquire(globex.app, body()).status == "created"
    assert fake.creates == 2


def test_max_entries_refuses_a_third_scope(tenant, fake):
    for user in ("alice", "bob"):
        assert acquire(tenant.app, body(scope(user, max_entries=2))).status == "created"
    third = acquire(tenant.app, body(scope("carol", max_entries=2)))
    assert (third.status, third.reason, third.lease) == ("bypass", "registry_full", None)
    assert fake.creates == 2 and states(tenant.app) == {"active": 2}
    # An existing entry is still a hit when the registry is full.
    assert acquire(tenant.app, body(scope("alice", max_entries=2))).status == "hit"


def test_a_prefix_below_the_minimum_bypasses_without_a_provider_call(tenant, fake):
    small = {"system_instruction": "short"}
    outcome = acquire(tenant.app, body(scope(min_prefix_tokens=1000), small))
    assert (outcome.status, outcome.reason) == ("bypass", "below_minimum")
    assert outcome.prefix_tokens < 1000
    assert fake.creates == 0
    assert CacheEntry.objects.count() == 0


def test_the_gemini_model_floor_applies_over_a_lower_policy_minimum(tenant, settings):
    # 600 words ≈ 1,100 estimated tokens: above the policy's 100, below gemini-2.5's 2,048.
    outcome = acquire(tenant.app, body(scope(provider="gemini")))
    assert (outcome.status, outcome.reason) == ("bypass", "below_minimum")


@pytest.mark.parametrize("failure", ["provider_unavailable", "provider_rate_limited"])
def test_a_provider_failure_bypasses_and_leaves_nothing(tenant, fake, settings, failure):
    settings.CTXADMIN_CACHE_FAKE_FAILURE = failure
    outcome = acquire(tenant.app, body())
    assert (outcome.status, outcome.reason) == ("bypass", "provider_error")
    assert fake.creates == 1
    status = registry.scope_status(tenant.app, outcome.scope_fingerprint)
    assert (status["entries"], status["in_flight"]) == (0, 0)
    # Waiters that joined the failed create can still read it until their deadline; then
    # the cleanup removes it.
    CacheEntry.objects.update(deadline="2000-01-01T00:00:00Z")
    registry.cleanup()
    assert CacheEntry.objects.count() == 0
    # No negative caching: once the provider recovers, the next acquire creates.
    settings.CTXADMIN_CACHE_FAKE_FAILURE = ""
    assert acquire(tenant.app, body()).status == "created"


def test_waiters_of_a_failed_create_bypass_too(tenant, fake, settings):
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 150
    settings.CTXADMIN_CACHE_FAKE_FAILURE = "provider_unavailable"
    outcomes = _parallel(tenant.app, [body()] * 8, workers=8)
    assert {(o.status, o.reason) for o in outcomes} == {("bypass", "provider_error")}
    assert fake.creates == 1


def test_a_provider_timeout_is_cleaned_up_by_tag(tenant, fake, settings):
    settings.CTXADMIN_CACHE_FAKE_FAILURE = "provider_timeout"
    outcome = acquire(tenant.app, body())
    assert (outcome.status, outcome.reason) == ("bypass", "provider_error")
    entry = CacheEntry.objects.get()
    assert (entry.state, entry.delete_reason, entry.resource) == ("deleting", "creator_lost", "")
    registry.cleanup()
    assert CacheEntry.objects.count() == 0


def test_a_deadline_passing_while_the_provider_hangs_bypasses_and_the_late_resource_is_deleted(
    tenant, fake, settings
):
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 1500
    started = time.monotonic()
    outcome = acquire(tenant.app, body(timeout_ms=300))
    assert time.monotonic() - started < 1.0
    assert (outcome.status, outcome.reason) == ("bypass", "deadline_exceeded")
    status = registry.scope_status(tenant.app, outcome.scope_fingerprint)
    assert status["in_flight"] == 1 and status["entries"] == 0
    _until(lambda: CacheEntry.objects.filter(state="creating").count() == 0, 5)
    entry = CacheEntry.objects.get()
    assert (entry.state, entry.delete_reason) == ("deleting", "orphan")
    assert fake.creates == 1 and len(fake.resources) == 1
    registry.cleanup()
    assert CacheEntry.objects.count() == 0
    assert fake.resources == {} and fake.deletes == 1
    status = registry.scope_status(tenant.app, outcome.scope_fingerprint)
    assert (status["entries"], status["in_flight"], status["deleting"]) == (0, 0, 0)


def test_a_waiter_within_its_deadline_keeps_a_slow_create(tenant, fake, settings):
    """The creator gives up at its deadline, but a waiter with a later one still gets it."""
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 800
    results = {}

    def creator():
        results["creator"] = acquire(tenant.app, body(timeout_ms=200))
        connection.close()

    thread = threading.Thread(target=creator)
    thread.start()
    _until(lambda: CacheEntry.objects.filter(state="creating").exists(), 5)
    waiter = acquire(tenant.app, body(timeout_ms=5000))
    thread.join()
    assert results["creator"].reason == "deadline_exceeded"
    assert (waiter.status, waiter.waited) == ("hit", True)
    assert fake.creates == 1 and states(tenant.app) == {"active": 1}


def test_too_many_waiters_bypass(tenant, fake, settings):
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 600
    outcomes = _parallel(tenant.app, [body(scope(max_waiters=2))] * 8, workers=8)
    reasons = sorted(o.reason or o.status for o in outcomes)
    assert reasons.count("too_many_waiters") >= 1
    assert fake.creates == 1


def test_ttl_expiry_expires_the_lease_and_a_reacquire_creates_anew(tenant, fake):
    first = acquire(tenant.app, body(ttl_ms=1000))
    assert first.status == "created"
    registry.resolve(tenant.app, first.lease)
    time.sleep(1.1)
    with pytest.raises(registry.LeaseError) as error:
        registry.resolve(tenant.app, first.lease)
    assert error.value.code == "lease_expired"
    second = acquire(tenant.app, body(ttl_ms=1000))
    assert second.status == "created"
    assert fake.creates == 2
    registry.cleanup()
    assert states(tenant.app) == {"active": 1}
    assert len(fake.resources) == 1 and fake.deletes == 1


def test_a_lease_too_close_to_expiry_is_not_handed_out(tenant, fake):
    from datetime import timedelta

    from django.utils import timezone

    acquire(tenant.app, body(ttl_ms=10_000))
    # 10 s entries keep a 1 s margin: with 0.5 s left the entry is retired, not handed out.
    CacheEntry.objects.update(expires_at=timezone.now() + timedelta(milliseconds=500))
    again = acquire(tenant.app, body(ttl_ms=10_000))
    assert again.status == "created" and fake.creates == 2
    assert states(tenant.app) == {"active": 1, "deleting": 1}


def test_the_cleanup_retires_expired_entries_and_deletes_them(tenant, fake):
    acquire(tenant.app, body(ttl_ms=1000))
    acquire(tenant.app, body(scope("bob"), ttl_ms=1000))
    time.sleep(1.1)
    assert registry.cleanup() == {
        "expired": 2,
        "creators_lost": 0,
        "failed_purged": 0,
        "deleted": 2,
    }
    assert CacheEntry.objects.count() == 0 and fake.resources == {}


def test_invalidate_expires_leases_across_prefixes_and_ttls_and_deletes(tenant, fake):
    outcomes = [
        acquire(tenant.app, body(prefix_=prefix(marker="one"))),
        acquire(tenant.app, body(prefix_=prefix(marker="two"))),
        acquire(tenant.app, body(ttl_ms=60_000)),
    ]
    leases = [outcome.lease for outcome in outcomes]
    other = acquire(tenant.app, body(scope("bob"))).lease
    fp = outcomes[0].scope_fingerprint
    result = registry.invalidate(tenant.app, fp)
    assert result["entries_invalidated"] == 3 and result["generation"] == 2
    for lease in leases:
        with pytest.raises(registry.LeaseError, match="lease_expired"):
            registry.resolve(tenant.app, lease)
    registry.resolve(tenant.app, other)  # another user's scope is untouched
    assert registry.cleanup()["deleted"] == 3
    assert fake.deletes == 3 and len(fake.resources) == 1
    # The scope lives on at the new generation.
    again = acquire(tenant.app, body())
    assert (again.status, again.generation) == ("created", 2)


def test_invalidating_during_a_create_orphans_it(tenant, fake, settings):
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 500
    results = {}

    def creator():
        results["outcome"] = acquire(tenant.app, body(timeout_ms=5000))
        connection.close()

    thread = threading.Thread(target=creator)
    thread.start()
    _until(lambda: CacheEntry.objects.filter(state="creating").exists(), 5)
    scope_row = CacheScope.objects.get()
    assert registry.invalidate(tenant.app, scope_row.fingerprint)["creates_in_flight"] == 1
    thread.join()
    # The first create landed after the invalidation: deleted; the caller got a fresh one.
    assert results["outcome"].status == "created"
    assert results["outcome"].generation == 2
    assert fake.creates == 2
    registry.cleanup()
    assert states(tenant.app) == {"active": 1} and len(fake.resources) == 1


def test_a_dead_creator_is_swept_and_its_resource_found_by_tag(tenant, fake):
    outcome = acquire(tenant.app, body())
    entry = CacheEntry.objects.get()
    # As if the creator had died between the provider's answer and the install.
    CacheEntry.objects.filter(pk=entry.pk).update(
        state="creating",
        resource="",
        deadline="2000-01-01T00:00:00Z",
        create_lease_until="2000-01-01T00:00:00Z",
    )
    assert len(fake.resources) == 1
    result = registry.cleanup()
    assert result["creators_lost"] == 1 and result["deleted"] == 1
    assert fake.resources == {} and CacheEntry.objects.count() == 0
    with pytest.raises(registry.LeaseError):
        registry.resolve(tenant.app, outcome.lease)


def test_failed_provider_deletes_are_retried_with_backoff(tenant, fake, monkeypatch):
    from ctxadmin.providers.base import ProviderError

    acquire(tenant.app, body(ttl_ms=1000))
    time.sleep(1.1)
    real_delete = fake.delete
    monkeypatch.setattr(
        fake, "delete", lambda *a, **k: (_ for _ in ()).throw(ProviderError("provider_unavailable"))
    )
    registry.cleanup()
    entry = CacheEntry.objects.get()
    assert (entry.state, entry.delete_attempts, entry.error_code) == (
        "deleting",
        1,
        "provider_unavailable",
    )
    assert registry.cleanup()["deleted"] == 0  # not due yet
    CacheEntry.objects.update(delete_due_at="2000-01-01T00:00:00Z")
    monkeypatch.setattr(fake, "delete", real_delete)
    assert registry.cleanup()["deleted"] == 1
    assert CacheEntry.objects.count() == 0 and fake.resources == {}


def test_leases_are_bound_to_their_app_and_tamper_proof(fake):
    acme, globex = make_tenant("acme"), make_tenant("globex")
    lease = acquire(acme.app, body()).lease
    for app, value in [(globex.app, lease), (acme.app, lease[:-2] + "xx"), (acme.app, "junk")]:
        with pytest.raises(registry.LeaseError) as error:
            registry.resolve(app, value)
        assert error.value.code == "lease_invalid"


def test_resource_names_are_encrypted_at_rest_and_keys_rotate(tenant, fake, settings):
    from cryptography.fernet import Fernet

    old = Fernet.generate_key().decode()
    settings.CTXADMIN_CACHE_ENCRYPTION_KEYS = [old]
    lease = acquire(tenant.app, body()).lease
    name = registry.resolve(tenant.app, lease).resource_name
    stored = CacheEntry.objects.values_list("resource", flat=True).get()
    assert name not in stored and crypto.decrypt(stored) == name
    settings.CTXADMIN_CACHE_ENCRYPTION_KEYS = [Fernet.generate_key().decode(), old]
    assert registry.resolve(tenant.app, lease).resource_name == name
    settings.CTXADMIN_CACHE_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(registry.LeaseError, match="lease_expired"):
        registry.resolve(tenant.app, lease)


def test_the_prefix_fingerprint_ignores_secret_named_keys(tenant, fake):
    plain = prefix()
    with_secret = prefix()
    with_secret["contents"][0]["parts"].append(
        {"functionResponse": {"name": "login", "response": {"ok": True, "api_key": "sk-1"}}}
    )
    plain["contents"][0]["parts"].append(
        {"functionResponse": {"name": "login", "response": {"ok": True}}}
    )
    a = acquire(tenant.app, body(prefix_=plain))
    b = acquire(tenant.app, body(prefix_=with_secret))
    assert a.prefix_fingerprint == b.prefix_fingerprint and b.status == "hit"


def test_nothing_logged_carries_the_prefix_or_a_resource_name(tenant, fake, settings, caplog):
    caplog.set_level("DEBUG")
    outcome = acquire(tenant.app, body())
    acquire(tenant.app, body())
    name = registry.resolve(tenant.app, outcome.lease).resource_name
    registry.invalidate(tenant.app, outcome.scope_fingerprint)
    registry.cleanup()
    settings.CTXADMIN_CACHE_FAKE_FAILURE = "provider_unavailable"
    acquire(tenant.app, body(scope("bob")))
    text = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "cache_acquire" in text and "cache_invalidate" in text
    assert PREFIX_MARKER not in text and name not in text


def _until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_cache_shutdown_invalidates_everything_and_deletes_now(fake):
    from io import StringIO

    from django.core.management import call_command

    acme, globex = make_tenant("acme"), make_tenant("globex")
    lease = acquire(acme.app, body()).lease
    acquire(acme.app, body(scope("bob")))
    theirs = acquire(globex.app, body()).lease
    out = StringIO()
    call_command("cache_shutdown", "--app", "acme", stdout=out)
    assert "2 entries invalidated; 2 provider deletes run; 0 still to retry." in out.getvalue()
    with pytest.raises(registry.LeaseError):
        registry.resolve(acme.app, lease)
    registry.resolve(globex.app, theirs)
    call_command("cache_shutdown", stdout=out)
    assert fake.resources == {} and CacheEntry.objects.count() == 0


def test_an_earlier_absolute_deadline_of_the_caller_wins(tenant, fake, settings):
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 1000
    request = registry.parse_acquire(body(timeout_ms=10_000), tenant.app)
    started = time.monotonic()
    outcome = registry.acquire(tenant.app, request, deadline=started + 0.2)
    assert (outcome.status, outcome.reason) == ("bypass", "deadline_exceeded")
    assert time.monotonic() - started < 0.9


def test_hits_are_counted_and_written_in_batches(tenant, fake):
    registry.flush_hits()
    created = acquire(tenant.app, body())
    for _ in range(3):
        assert acquire(tenant.app, body()).status == "hit"
    status = registry.scope_status(tenant.app, created.scope_fingerprint)  # flushes first
    assert status["live_entries"][0]["hits"] == 3
    entry = CacheEntry.objects.get()
    assert entry.hits == 3 and entry.last_hit_at is not None
    assert registry.flush_hits() == 0  # nothing left to write
