"""The ingestion outbox with real worker processes, real Redis and real PostgreSQL: a job
drained on commit, a worker killed mid-job, the broker down while requests arrive, and
erasures racing ingestion."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from ctxadmin import stack
from memory.models import OutboxJob
from memory.scope import scope_fingerprint
from memory.tasks import drain_outbox
from tests.conftest import (
    database_url_for_current_connection,
    make_tenant,
    spawn,
    start_celery_worker,
)
from tests.outbox_helpers import (
    admit,
    job,
    memories_url,
    scope_entries,
    session_with_events,
    wait_for,
)


# Workers started here take leases of a few seconds and run their own beat every second on
# a queue of their own (so a crashed worker's job is claimed again quickly, and only by
# them: the run's shared worker never hears of these tests' jobs).
def fast_worker(work_dir: Path, **env: str):
    return start_celery_worker(
        work_dir,
        env={
            "CTXADMIN_OUTBOX_LEASE_SECONDS": "3",
            "CTXADMIN_OUTBOX_SWEEP_SECONDS": "1",
            "CTXADMIN_CELERY_QUEUE": f"outbox-{work_dir.name}-{os.getpid()}",
            **env,
        },
        beat=True,
    )


@pytest.fixture
def unpublished(monkeypatch):
    """Admissions in this process publish nothing: only the test's own workers, woken by
    their beat, drain the jobs."""
    monkeypatch.setattr(drain_outbox, "delay_on_commit", lambda *args, **kwargs: None)


def ended(client, app: str, job_id: str):
    def check():
        status = job(client, app, job_id)
        return status if status["phase"] in OutboxJob.TERMINAL else None

    return check


@pytest.mark.django_db(transaction=True)
def test_a_worker_drains_a_1001_event_job_admitted_through_the_api(celery_worker_process):
    tenant = make_tenant("acme")
    client = tenant.client()
    session_with_events(client, "acme", "alice", "s1", 1001, secret_at=500)
    admitted = admit(client, "acme", "alice", "s1").json()
    status = wait_for(ended(client, "acme", admitted["job_id"]), timeout=90)
    assert status is not None, celery_worker_process["log"].read_text()[-3000:]
    assert status["phase"] == "completed" and status["batches"] == 3
    assert status["added"] == 1001 - status["skipped"]
    entries = scope_entries(tenant.app.pk, "alice")
    assert len(entries) == status["added"]
    assert not any("sk-outboxSECRET" in content for _key, content in entries)
    again = admit(client, "acme", "alice", "s1", status=200).json()
    assert again["job_id"] == admitted["job_id"] and again["deduplicated"] is True


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_job_is_replaced_from_the_saved_cursor(tmp_path, unpublished):
    tenant = make_tenant("acme")
    client = tenant.client()
    session_with_events(client, "acme", "alice", "k", 2001)  # batches 500 x 4 + 1
    first = fast_worker(tmp_path / "first")
    lock_key = int(scope_fingerprint(tenant.app, "alice")[:8], 16) - 2**31
    blocker = psycopg.connect(database_url_for_current_connection(), autocommit=True)
    try:
        admitted = admit(client, "acme", "alice", "k").json()
        wrote_one = wait_for(lambda: job(client, "acme", admitted["job_id"])["cursor"] >= 500)
        assert wrote_one, first.log.read_text()[-3000:]
        # Hold the scope's erasure lock: the worker's next batch waits for it, so the kill
        # lands between batches whatever the timing.
        blocker.execute("SELECT pg_advisory_lock(%s, %s)", [0x6D656D00, lock_key])
        os.killpg(first.pid, signal.SIGKILL)
        first.process.wait(timeout=10)
        at_kill = job(client, "acme", admitted["job_id"])
        assert at_kill["phase"] == "running" and 500 <= at_kill["cursor"] < 2001
        blocker.execute("SELECT pg_advisory_unlock(%s, %s)", [0x6D656D00, lock_key])
    finally:
        blocker.close()
        first.stop()
    second = fast_worker(tmp_path / "second")
    try:
        status = wait_for(ended(client, "acme", admitted["job_id"]), timeout=90)
        assert status is not None, second.log.read_text()[-3000:]
    finally:
        second.stop()
    assert status["phase"] == "completed" and status["attempts"] == 2
    assert (status["added"], status["duplicates"], status["skipped"]) == (2001, 0, 0)
    entries = scope_entries(tenant.app.pk, "alice")
    assert len(entries) == 2001 == len({key for key, _content in entries})
    assert {key for key, _ in entries} == {f"session:k:k-{n}" for n in range(2001)}


def _web_server(work_dir: Path, broker_url: str) -> tuple[subprocess.Popen, str]:
    port = stack.free_port(None)
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_current_connection(),
        "CTXADMIN_DB_POOL": "false",
        "REDIS_URL": broker_url,
        "CELERY_BROKER_URL": broker_url,
    }
    work_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "1",
    ]
    process = spawn(argv, env, work_dir / "web.log")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stack.terminate_group(process)
            raise RuntimeError((work_dir / "web.log").read_text()[-3000:])
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_admission_works_with_the_broker_down_and_the_beat_drains_after(tmp_path):
    tenant = make_tenant("acme")
    client = tenant.client()
    for n in range(5):
        session_with_events(client, "acme", "alice", f"s{n}", 3)
    redis = stack.LocalRedis(tmp_path / "redis")
    redis.port = stack.free_port(None)
    broker = f"redis://127.0.0.1:{redis.port}/0"
    assert not stack.redis_answers(broker, timeout=0.3)  # the broker is down
    web, base = _web_server(tmp_path / "web", broker)
    try:
        ids = []
        for n in range(5):
            answer = httpx.post(
                f"{base}{memories_url('acme', 'alice')}/ingestions",
                json={"session_id": f"s{n}"},
                headers={"Authorization": f"Bearer {tenant.key}"},
                timeout=30,
            )
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["job_id"])
    finally:
        stack.terminate_group(web)
    pending = OutboxJob.objects.filter(phase="pending").values_list("id", flat=True)
    assert {str(job_id) for job_id in pending} == set(ids)  # written, waiting
    redis.start()  # the broker is back; nothing was ever published for these jobs
    worker = fast_worker(tmp_path / "worker", REDIS_URL=broker, CELERY_BROKER_URL=broker)
    try:
        for job_id in ids:
            status = wait_for(ended(client, "acme", job_id), timeout=60)
            assert status is not None and status["phase"] == "completed", worker.log.read_text()[
                -3000:
            ]
    finally:
        worker.stop()
        redis.stop()
    assert len(scope_entries(tenant.app.pk, "alice")) == 15


@pytest.mark.django_db(transaction=True)
def test_erasure_racing_ingestion_leaves_nothing_behind(tmp_path, unpublished):
    tenant = make_tenant("acme")
    client = tenant.client()
    rounds = 20
    for n in range(rounds):
        session_with_events(client, "acme", f"u{n}", "s", 501)  # two batches: 500, 1
    worker = fast_worker(tmp_path / "worker")
    outcomes: dict[str, int] = {}
    try:
        for n in range(rounds):
            user = f"u{n}"
            admitted = admit(client, "acme", user, "s").json()
            time.sleep(0.05 * n)  # from queued to long finished, across the rounds
            erased = client.delete(
                memories_url("acme", user), {"confirm": f"erase user {user}"}, format="json"
            )
            assert erased.status_code == 200, erased.content
            status = wait_for(ended(client, "acme", admitted["job_id"]), timeout=60)
            assert status is not None, worker.log.read_text()[-3000:]
            outcome = status["phase"] + (f":{status['error']['code']}" if status["error"] else "")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            assert scope_entries(tenant.app.pk, user) == [], outcome
            assert OutboxJob.objects.get(pk=admitted["job_id"]).payload == []
    finally:
        worker.stop()
    # Nothing came back after the jobs ended, in any scope.
    assert all(scope_entries(tenant.app.pk, f"u{n}") == [] for n in range(rounds))
    assert sum(outcomes.values()) == rounds
    assert set(outcomes) <= {"cancelled:erased", "cancelled:stale_epoch", "completed"}
