"""Single flight across processes, against a local server speaking Gemini's cachedContents
wire format; and the beat's cleanup in a real Celery worker deleting at that server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from django.db import connection

from caching import registry
from caching.models import CacheEntry
from ctxadmin import stack
from ctxadmin.testing.fake_gemini_cache import FakeGeminiCache
from tests.cache_helpers import acquire, body, prefix, scope, states
from tests.conftest import database_url_for_current_connection, make_tenant, start_celery_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gemini(settings, monkeypatch):
    from caching.tasks import cleanup

    # Cleanup runs here or in the worker a test starts, never in another test's worker.
    monkeypatch.setattr(cleanup, "delay_on_commit", lambda *a, **k: None)
    with FakeGeminiCache(create_delay_s=0.1) as fake:
        settings.CTXADMIN_GEMINI_BASE_URL = fake.base_url
        monkeypatch.setenv("CTXADMIN_GEMINI_API_KEY", fake.api_key)
        yield fake


def _gemini_body(*, timeout_ms: int = 20_000, ttl_ms: int | None = None) -> dict:
    # About 12,000 estimated tokens: above gemini-2.5's floor of 2,048.
    return body(scope(provider="gemini"), prefix(words=7000), timeout_ms=timeout_ms, ttl_ms=ttl_ms)


def _environment(fake: FakeGeminiCache) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": database_url_for_current_connection(),
        "CTXADMIN_DB_POOL": "false",
        "CTXADMIN_GEMINI_BASE_URL": fake.base_url,
        "CTXADMIN_GEMINI_API_KEY": fake.api_key,
    }


def test_24_acquires_in_two_processes_make_one_provider_create(gemini):
    tenant = make_tenant("acme")
    value = _gemini_body()
    other = subprocess.Popen(
        [sys.executable, "-m", "tests.cache_acquirer", "acme", "12"],
        cwd=stack.PROJECT_DIR,
        env=_environment(gemini),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == "ready"
        start_at = time.time() + 0.5
        other.stdin.write(json.dumps({"body": value, "start_at": start_at}) + "\n")
        other.stdin.flush()
        here: list = [None] * 12

        def run(index: int) -> None:
            while time.time() < start_at:
                time.sleep(0.001)
            try:
                here[index] = acquire(tenant.app, value).as_json()
            finally:
                connection.close()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        there = json.loads(other.communicate(timeout=60)[0])
    finally:
        other.kill()
    outcomes = here + there
    assert gemini.creates == 1
    assert sorted(o["status"] for o in outcomes).count("created") == 1
    assert {o["status"] for o in outcomes} == {"created", "hit"}
    assert any(o["waited"] for o in there) or any(o["status"] == "created" for o in there)
    assert states(tenant.app) == {"active": 1}
    names = {registry.resolve(tenant.app, o["lease"]).resource_name for o in outcomes}
    assert names == set(gemini.resources)
    later = acquire(tenant.app, value)
    assert (later.status, later.waited) == ("hit", False)
    assert gemini.creates == 1 and gemini.problems == []


def test_an_orphan_from_a_hung_gemini_create_is_deleted_at_the_provider(gemini):
    tenant = make_tenant("acme")
    gemini.hold_creates()
    outcome = acquire(tenant.app, _gemini_body(timeout_ms=300))
    assert (outcome.status, outcome.reason) == ("bypass", "deadline_exceeded")
    gemini.release_creates()
    deadline = time.monotonic() + 10
    while CacheEntry.objects.filter(state="creating").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert len(gemini.resources) == 1
    registry.cleanup()
    assert gemini.resources == {} and gemini.deletes == 1
    assert CacheEntry.objects.count() == 0


def test_the_beat_cleanup_in_a_worker_deletes_invalidated_and_expired_entries(gemini, tmp_path):
    tenant = make_tenant("acme")
    leases = [
        acquire(tenant.app, _gemini_body()).lease,
        acquire(tenant.app, body(scope(provider="gemini"), prefix(words=7000, marker="b"))).lease,
        acquire(tenant.app, _gemini_body(ttl_ms=1000)).lease,
    ]
    assert gemini.creates == 3
    names = list(gemini.resources)
    fingerprint = acquire(tenant.app, _gemini_body()).scope_fingerprint
    environment = {
        "CTXADMIN_CELERY_QUEUE": f"cache-{os.getpid()}-{time.monotonic_ns()}",
        "CTXADMIN_CACHE_CLEANUP_SECONDS": "1",
        "CTXADMIN_GEMINI_BASE_URL": gemini.base_url,
        "CTXADMIN_GEMINI_API_KEY": gemini.api_key,
        # JSON lines: the housekeeping line names its task and counts.
        "CTXADMIN_LOG_FORMAT": "json",
    }
    worker = start_celery_worker(tmp_path, env=environment, beat=True)
    try:
        result = registry.invalidate(tenant.app, fingerprint)
        assert result["entries_invalidated"] == 3
        for lease in leases:
            with pytest.raises(registry.LeaseError, match="lease_expired"):
                registry.resolve(tenant.app, lease)
        deadline = time.monotonic() + 30
        while CacheEntry.objects.exists():
            assert time.monotonic() < deadline, worker.log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        worker.stop()
    assert gemini.deletes == 3 and gemini.resources == {}
    assert gemini.problems == []
    worker_output = worker.log.read_text()
    swept = [
        json.loads(line)
        for line in worker_output.splitlines()
        if line.startswith("{") and '"housekeeping"' in line
    ]
    assert any(line.get("task") == "caching.cleanup" for line in swept), worker_output[-3000:]
    for name in names:
        assert name.split("/")[-1] not in worker_output
