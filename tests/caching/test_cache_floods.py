"""Acquire floods through the API: callers past a key's waiter cap and past an app's entry
cap, at once, from many threads. What is sampled from the registry while they run never
exceeds the caps, and every answer is a documented one."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections

from caching.models import CacheEntry
from tests.cache_helpers import body, scope
from tests.conftest import make_tenant
from tests.sessions_app.test_sessions_schema import check

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fake")]


class Sampler:
    """The largest value ``query`` returned, read every few milliseconds on its own
    connection until stopped."""

    def __init__(self, query: str, params: list):
        self.query, self.params, self.highest = query, params, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with connection.cursor() as cursor:
                while not self._stop.is_set():
                    cursor.execute(self.query, self.params)
                    self.highest = max(self.highest, cursor.fetchone()[0] or 0)
                    time.sleep(0.005)
        finally:
            connections.close_all()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def flood(tenant, bodies: list[dict], app: str = "acme") -> list[tuple[int, dict]]:
    barrier = threading.Barrier(len(bodies))

    def call(value):
        try:
            client = tenant.client()
            barrier.wait()
            answer = client.post(f"/api/v1/apps/{app}/cache/acquire", value, format="json")
            return answer.status_code, answer.json()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(call, bodies))


def _until(predicate, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_callers_past_the_waiter_cap_bypass_and_the_count_never_overshoots(settings, fake):
    tenant = make_tenant("acme")
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 2500
    value = body(scope(max_waiters=3))
    first: list = []
    creator = threading.Thread(target=lambda: first.extend(flood(tenant, [value])))
    creator.start()
    _until(lambda: CacheEntry.objects.filter(state="creating").exists(), 10)
    with Sampler(
        "SELECT max(waiters) FROM caching_cacheentry WHERE app_id = %s", [tenant.app.pk]
    ) as waiters:
        answers = flood(tenant, [value] * 16)
        creator.join()
    assert waiters.highest <= 3
    assert first[0][0] == 200 and first[0][1]["status"] == "created"
    assert {code for code, _ in answers} == {200}
    for _code, answer in answers:
        check("CacheAcquired", answer)
    kinds = Counter("waited" if a["waited"] else a["reason"] or a["status"] for _code, a in answers)
    assert set(kinds) <= {"waited", "too_many_waiters", "hit"}
    assert kinds["waited"] <= 3 and kinds["too_many_waiters"] >= 16 - 3 - kinds["hit"]
    assert kinds["too_many_waiters"] >= 1
    refused = [a for _c, a in answers if a["reason"] == "too_many_waiters"]
    assert all(a["status"] == "bypass" and a["lease"] is None for a in refused)
    assert fake.creates == 1
    assert list(CacheEntry.objects.values_list("state", "waiters")) == [("active", 0)]


def test_creates_past_the_entry_cap_are_registry_full_and_live_entries_never_overshoot(
    settings, fake
):
    acme, globex = make_tenant("acme"), make_tenant("globex")
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 200
    live = (
        "SELECT count(*) FROM caching_cacheentry WHERE app_id = %s "
        "AND (state = 'creating' OR (state = 'active' AND expires_at > now()))"
    )
    for tenant in (acme, globex):
        bodies = [body(scope(f"user-{n}", max_entries=3)) for n in range(20)]
        with Sampler(live, [tenant.app.pk]) as sampled:
            answers = flood(tenant, bodies, app=tenant.app.name)
        assert sampled.highest <= 3
        assert {code for code, _ in answers} == {200}
        outcomes = Counter(a["reason"] or a["status"] for _c, a in answers)
        assert outcomes == {"created": 3, "registry_full": 17}, outcomes
        assert CacheEntry.objects.filter(app=tenant.app, state="active").count() == 3
    # The apps' caps are their own: the second app filled its three entries as the first.
    assert fake.creates == 6


def test_a_failed_create_answers_its_waiters_502_and_the_rest_bypass(settings, fake):
    tenant = make_tenant("acme")
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 1500
    settings.CTXADMIN_CACHE_FAKE_FAILURE = "provider_unavailable"
    value = body(scope(max_waiters=2, failure_mode="error"))
    answers = flood(tenant, [value] * 12)
    errors = [a["error"] for code, a in answers if code == 502]
    bypassed = [a for code, a in answers if code == 200]
    assert len(errors) + len(bypassed) == 12
    assert 1 <= len(errors) <= 3  # the creator and at most max_waiters waiters
    assert all(
        e
        == {
            "code": "cache_provider_error",
            "message": "The provider could not create the cache.",
            "details": {"provider_code": "provider_unavailable"},
        }
        for e in errors
    )
    assert {a["reason"] for a in bypassed} <= {"too_many_waiters"}
    assert fake.creates == 1
    assert not CacheEntry.objects.filter(state__in=("creating", "active")).exists()
