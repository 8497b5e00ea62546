"""Outbox admissions at once, from many threads, past every cap: active jobs and bytes per
scope, active jobs per app, both in the deployment, and the cap on all rows; with duplicates
and a revived job in the crowd. What is sampled from the outbox while they run never exceeds
a cap, and every answer is a 202, a deduplicated 200, or a 429 naming its limit."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from django.db import connection, connections

from memory.models import OutboxJob
from memory.outbox import operations
from memory.tasks import drain_outbox
from tests.conftest import make_tenant
from tests.outbox_helpers import admit, memories_url, session_with_events

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_worker(monkeypatch):
    """The jobs stay active: no worker of this run is told to drain them."""
    monkeypatch.setattr(drain_outbox, "delay_on_commit", lambda *args, **kwargs: None)


class Sampler:
    """The highest values of one row of counts, read every few milliseconds on its own
    connection while the admissions run."""

    def __init__(self, query: str, params: list | None = None):
        self.query, self.params = query, params or []
        self.highest: tuple = ()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with connection.cursor() as cursor:
                while not self._stop.is_set():
                    cursor.execute(self.query, self.params)
                    row = tuple(value or 0 for value in cursor.fetchone())
                    self.highest = tuple(map(max, self.highest or row, row))
                    time.sleep(0.003)
        finally:
            connections.close_all()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def at_once(tenants: dict, requests: list[tuple[str, str, str]]) -> list[tuple[int, dict]]:
    """``(app, user, session)`` admissions, all released together."""
    barrier = threading.Barrier(len(requests))
    answers: list = [None] * len(requests)

    def run(index: int, app: str, user: str, sid: str) -> None:
        try:
            client = tenants[app].client()
            barrier.wait()
            result = client.post(
                f"{memories_url(app, user)}/ingestions", {"session_id": sid}, format="json"
            )
            answers[index] = (result.status_code, result.json())
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=run, args=(index, *request))
        for index, request in enumerate(requests)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def limits_of(answers) -> Counter:
    counts: Counter = Counter()
    for code, answer in answers:
        if code == 429:
            assert answer["error"]["code"] in (
                "outbox_capacity_exceeded",
                "terminal_retention_full",
            )
            counts[answer["error"]["details"]["limit"]] += 1
        else:
            assert code in (200, 202), answer
            counts[code] += 1
    return counts


def sessions(tenants: dict, layout: dict[tuple[str, str], int]) -> list[tuple[str, str, str]]:
    """``count`` one-event sessions ``s00``, ``s01``… per (app, user); all the same size."""
    made = []
    for (app, user), count in layout.items():
        for n in range(count):
            session_with_events(tenants[app].client(), app, user, f"s{n:02d}", 1)
            made.append((app, user, f"s{n:02d}"))
    return made


def test_job_caps_per_scope_and_in_the_deployment_hold_across_apps(settings):
    settings.CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_SCOPE = 3
    settings.CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS = 5
    tenants = {"acme": make_tenant("acme"), "globex": make_tenant("globex")}
    made = sessions(tenants, {("acme", "alice"): 6, ("acme", "bob"): 6, ("globex", "alice"): 6})
    per_scope = (
        "SELECT count(*) FILTER (WHERE phase IN ('pending', 'running', 'retry')), "
        "(SELECT max(n) FROM (SELECT count(*) AS n FROM memory_outboxjob "
        "WHERE phase IN ('pending', 'running', 'retry') GROUP BY app_id, user_id) scopes) "
        "FROM memory_outboxjob"
    )
    with Sampler(per_scope) as sampled:
        answers = at_once(tenants, made)
    assert sampled.highest[0] <= 5 and sampled.highest[1] <= 3
    counted = limits_of(answers)
    assert counted[202] == 5, counted
    assert set(counted) <= {202, "active_jobs_per_scope", "active_jobs"}
    assert OutboxJob.objects.filter(phase="pending").count() == 5
    for app, user in (("acme", "alice"), ("acme", "bob"), ("globex", "alice")):
        assert OutboxJob.objects.filter(app__name=app, user_id=user).count() <= 3


def test_the_cap_per_app_holds_across_its_users_and_spares_other_apps(settings):
    """Twelve of one app's users and four of another's at once, the first app capped at
    four open jobs: exactly four of its admissions are taken (the cap is checked under the
    admission lock: no overshoot at all), the other app's all are."""
    settings.CTXADMIN_OUTBOX_MAX_ACTIVE_JOBS_PER_APP = 4
    tenants = {"acme": make_tenant("acme"), "globex": make_tenant("globex")}
    layout = {("acme", f"u{n:02d}"): 1 for n in range(12)}
    made = sessions(tenants, {**layout, **{("globex", f"u{n}"): 1 for n in range(4)}})
    per_app = (
        "SELECT max(n) FROM (SELECT count(*) AS n FROM memory_outboxjob "
        "WHERE phase IN ('pending', 'running', 'retry') GROUP BY app_id) apps"
    )
    with Sampler(per_app) as sampled:
        answers = at_once(tenants, made)
    assert sampled.highest[0] <= 4
    acme = limits_of(answers[:12])
    assert acme == Counter({202: 4, "active_jobs_per_app": 8}), acme
    assert limits_of(answers[12:]) == Counter({202: 4})
    assert OutboxJob.objects.filter(app__name="acme").count() == 4


def test_byte_caps_per_scope_and_in_the_deployment_hold(settings):
    tenants = {"acme": make_tenant("acme")}
    made = sessions(tenants, {("acme", "alice"): 8, ("acme", "bob"): 8, ("acme", "carol"): 1})
    # One job's payload, measured on a job that is then cancelled (no longer active).
    sample = admit(tenants["acme"].client(), "acme", "carol", "s00").json()["job_id"]
    size = OutboxJob.objects.get(pk=sample).payload_bytes
    operations.cancel(tenants["acme"].app, sample)
    settings.CTXADMIN_OUTBOX_MAX_ACTIVE_BYTES_PER_SCOPE = 3 * size + size // 2
    settings.CTXADMIN_OUTBOX_MAX_ACTIVE_BYTES = 5 * size + size // 2
    bytes_now = (
        "SELECT sum(payload_bytes) FILTER (WHERE phase IN ('pending', 'running', 'retry')), "
        "(SELECT max(b) FROM (SELECT sum(payload_bytes) AS b FROM memory_outboxjob "
        "WHERE phase IN ('pending', 'running', 'retry') GROUP BY app_id, user_id) scopes) "
        "FROM memory_outboxjob"
    )
    with Sampler(bytes_now) as sampled:
        answers = at_once(tenants, made[:16])
    assert sampled.highest[0] <= 5 * size + size // 2
    assert sampled.highest[1] <= 3 * size + size // 2
    counted = limits_of(answers)
    assert counted[202] == 5, counted
    assert set(counted) <= {202, "active_bytes_per_scope", "active_bytes"}
    assert OutboxJob.objects.filter(phase="pending").count() == 5


def test_the_row_cap_holds_with_duplicates_and_a_revived_job_in_the_crowd(settings):
    settings.CTXADMIN_OUTBOX_MAX_ROWS = 4
    tenants = {"acme": make_tenant("acme")}
    made = sessions(tenants, {("acme", "alice"): 10})
    revived = admit(tenants["acme"].client(), "acme", "alice", "s00").json()["job_id"]
    operations.cancel(tenants["acme"].app, revived)  # one ended row, revivable
    crowd = made + [("acme", "alice", "s01")] * 4  # s01 five times: one job
    with Sampler("SELECT count(*) FROM memory_outboxjob") as sampled:
        answers = at_once(tenants, crowd)
    assert sampled.highest[0] <= 4
    counted = limits_of(answers)
    by_session: dict[str, list[int]] = {}
    for (_app, _user, sid), (code, _answer) in zip(crowd, answers, strict=True):
        by_session.setdefault(sid, []).append(code)
    # The revived job replaces its own row and is never refused for the cap.
    assert by_session["s00"] == [202]
    assert OutboxJob.objects.get(pk=revived).phase == "pending"
    # s01 is one job: admitted once, its repeats deduplicated, or refused with the cap.
    assert by_session["s01"].count(202) <= 1
    if 202 in by_session["s01"]:
        assert set(by_session["s01"]) <= {202, 200}
    assert counted[202] == 4 and OutboxJob.objects.count() == 4
    assert set(counted) <= {202, 200, "rows"}
    job_ids = [a["job_id"] for code, a in answers if code in (200, 202)]
    assert len(job_ids) - len(set(job_ids)) == counted[200]


def test_one_session_admitted_by_twelve_callers_is_one_job(settings):
    tenants = {"acme": make_tenant("acme")}
    sessions(tenants, {("acme", "alice"): 1})
    answers = at_once(tenants, [("acme", "alice", "s00")] * 12)
    assert sorted(code for code, _ in answers) == [200] * 11 + [202]
    assert {a["job_id"] for _code, a in answers} == {str(OutboxJob.objects.get().pk)}
    assert all(a["deduplicated"] for code, a in answers if code == 200)
