"""Storms of compaction requests: asynchronous and synchronous requests at once on one
session and across sessions, with appends that queue automatic checks among them, and
with a real worker draining while they arrive. At most one compaction is ever in flight
per session; every request is answered 201, 202, 409 or 422 with a documented code, never
a 5xx; and every row is one an answer accounts for, ending in a terminal state."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
from django.db import connection, connections

from sessions_app.models import Checkpoint
from sessions_app.tasks import run_compaction
from tests.conftest import make_tenant
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTED = {
    201: {None},
    202: {None},
    409: {"compaction_in_progress", "stale_head", "compaction_conflict"},
    422: {"nothing_to_compact", "compaction_failed", "summary_too_large", "ineffective_summary"},
}
IN_FLIGHT = (
    "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM sessions_app_checkpoint "
    "WHERE status IN ('pending', 'running') GROUP BY session_id) sessions"
)


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def new_session(tenant, sid: str, turns: int = 6) -> str:
    api = tenant.client()
    assert api.post(sessions_url("acme"), {"session_id": sid}, format="json").status_code == 201
    base = f"{sessions_url('acme')}/{sid}"
    for turn in range(turns):
        events = [
            text("user", words(60, f"{sid}ask{turn}-"), event_id=f"u{turn}"),
            text("agent", words(60, f"{sid}reply{turn}-"), event_id=f"m{turn}"),
        ]
        assert api.post(f"{base}/events", {"events": events}, format="json").status_code == 201
    return base


class InFlight:
    """The most compactions seen pending or running at once in any one session."""

    def __init__(self):
        self.highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with connection.cursor() as cursor:
                while not self._stop.is_set():
                    cursor.execute(IN_FLIGHT)
                    self.highest = max(self.highest, cursor.fetchone()[0])
                    time.sleep(0.003)
        finally:
            connections.close_all()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def storm(tenant, calls: list[tuple[str, str, dict]]) -> list[tuple[int, dict]]:
    """``(method path, url, body)`` calls released together: ``compact`` posts a
    compaction request, ``append`` an event."""
    barrier = threading.Barrier(len(calls))
    answers: list = [None] * len(calls)

    def run(index: int, kind: str, url: str, body: dict) -> None:
        try:
            client = tenant.client()
            barrier.wait()
            path = f"{url}/compactions" if kind == "compact" else f"{url}/events"
            try:
                result = client.post(path, body, format="json")
            except Exception as exc:  # the test client raises what a view let escape
                answers[index] = (500, {"raised": repr(exc)})
                return
            answers[index] = (result.status_code, result.json())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, *call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def code_of(answer: dict) -> str | None:
    return answer["error"]["code"] if answer.get("error") else None  # a checkpoint's is null


def account(calls, answers) -> None:
    """Every answer documented; a request's row exists exactly when its answer says one was
    made (accepted, done, or failed and reported with its id)."""
    for (kind, _url, body), (status, answer) in zip(calls, answers, strict=True):
        if kind == "append":
            assert status == 201, answer
            continue
        assert status in DOCUMENTED and code_of(answer) in DOCUMENTED[status], (status, answer)
        row = Checkpoint.objects.filter(compaction_id=body["compaction_id"]).first()
        if status in (201, 202):
            assert row is not None and answer["compaction_id"] == body["compaction_id"]
        elif code_of(answer) == "compaction_in_progress":
            assert row is None, answer
            assert answer["error"]["details"]["compaction_id"] != body["compaction_id"]
        elif "compaction_id" in answer["error"]["details"]:
            # A synchronous run that failed: its row is kept, failed, and named.
            assert row is not None and row.status == "failed", answer
            assert answer["error"]["details"]["compaction_id"] == body["compaction_id"]
        else:  # refused before anything was written (a stale head)
            assert row is None, answer


def request(url: str, **extra) -> tuple[str, str, dict]:
    return ("compact", url, {"compaction_id": str(uuid.uuid4()), **extra})


@pytest.fixture
def published(monkeypatch):
    """Compaction tasks published on commit, by the checkpoint's own key (no worker runs
    them)."""
    sent: list[str] = []
    monkeypatch.setattr(
        run_compaction, "delay_on_commit", lambda checkpoint_id: sent.append(checkpoint_id)
    )
    return sent


def test_an_async_storm_on_one_session_accepts_one_and_conflicts_the_rest(published):
    tenant = make_tenant("acme")
    url = new_session(tenant, "s")
    calls = [request(url, **{"async": True}) for _ in range(16)]
    with InFlight() as sampled:
        answers = storm(tenant, calls)
        account(calls, answers)
        assert Counter(status for status, _ in answers) == {202: 1, 409: 15}
        accepted = next(a["compaction_id"] for status, a in answers if status == 202)
        conflicts = [a["error"]["details"]["compaction_id"] for s, a in answers if s == 409]
        assert set(conflicts) == {accepted}
        # The accepted request again is the same answer; the refused ones are still refused.
        first = next(call for call in calls if call[2]["compaction_id"] == accepted)
        refused = [call for call in calls if call is not first][:3]
        more = [first, *refused, *(request(url, **{"async": True}) for _ in range(8))]
        again = storm(tenant, more)
        account(more, again)
    assert sampled.highest == 1
    assert [status for status, _ in again].count(202) == 1 and again[0][0] == 202
    assert Counter(status for status, _ in again) == {202: 1, 409: 11}
    key = str(Checkpoint.objects.get(compaction_id=accepted).pk)  # what its task goes by
    assert published == [key]
    assert run_compaction.run(key) == "active"
    assert Checkpoint.objects.count() == 1


def test_one_compaction_id_sent_at_once_by_many_callers_is_one_row(published):
    tenant = make_tenant("acme")
    url = new_session(tenant, "s")
    same = request(url, **{"async": True})
    answers = storm(tenant, [same] * 12)
    ids = {same[2]["compaction_id"]}
    for status, answer in answers:
        # The caller that wrote the row, and those that read it after, answer 202; one that
        # raced the write is told a compaction (this one) is in progress.
        assert status in (202, 409), answer
        if status == 202:
            assert {answer["compaction_id"]} == ids
        else:
            assert answer["error"]["code"] == "compaction_in_progress"
            assert {answer["error"]["details"]["compaction_id"]} == ids
    rows = Checkpoint.objects.values_list("compaction_id", "id")
    assert [str(compaction_id) for compaction_id, _key in rows] == list(ids)
    assert published == [str(key) for _compaction_id, key in rows]


def test_mixed_storms_across_sessions_with_appends_keep_one_in_flight_per_session(published):
    tenant = make_tenant("acme")
    urls = [new_session(tenant, f"s{n}") for n in range(4)]
    policy = {"token_threshold": None, "event_threshold": 4, "retain_recent_exchanges": 1}
    for url in urls:
        assert (
            tenant.client().put(f"{url}/compaction-policy", policy, format="json").status_code
            == 200
        )
    turn = iter(range(1000))

    def append(url):
        n = next(turn)
        events = [text("agent", words(20, f"late{n}-"), event_id=f"late{n}", turn_complete=True)]
        return ("append", url, {"events": events})

    codes: Counter = Counter()
    runner = threading.Thread(target=lambda: None)
    runner.start()
    with InFlight() as sampled:
        for _round in range(3):
            calls = []
            for url in urls:
                calls += [request(url, **{"async": True}) for _ in range(3)]
                calls += [request(url) for _ in range(2)]
                calls += [request(url, expected_head=None) for _ in range(1)]
                calls += [append(url) for _ in range(2)]
            answers = storm(tenant, calls)
            runner.join()
            account(calls, answers)
            codes.update(code_of(answer) or status for status, answer in answers)
            # Run what was queued, as a worker would, while the next round arrives.
            queued = list(published)
            published.clear()
            runner = threading.Thread(target=lambda ids=queued: [_run(i) for i in ids])
            runner.start()
        runner.join()
        for checkpoint_id in published:  # what the last runs queued
            _run(checkpoint_id)
    assert sampled.highest <= 1
    assert codes[201] >= 1 and codes[202] >= 1 and codes["compaction_in_progress"] >= 1
    assert not Checkpoint.objects.filter(status__in=["pending", "running"]).exists()
    for url, sid in zip(urls, [f"s{n}" for n in range(4)], strict=True):
        built = tenant.client().post(
            f"{url}/context",
            {"current_input": {"role": "user", "parts": [{"text": "?"}]}},
            format="json",
        )
        assert built.status_code == 200, (sid, built.content)


def _run(checkpoint_id: str) -> None:
    try:
        run_compaction.run(checkpoint_id)
    finally:
        connections.close_all()


def test_storms_while_a_real_worker_drains_leave_no_compaction_behind(celery_worker_process):
    tenant = make_tenant("acme")
    urls = [new_session(tenant, f"w{n}", turns=4) for n in range(3)]
    answered: list[tuple[int, dict]] = []
    with InFlight() as sampled:
        for round_ in range(4):
            calls = [request(url, **{"async": True}) for url in urls for _ in range(4)]
            answers = storm(tenant, calls)
            account(calls, answers)
            answered += answers
            api = tenant.client()
            for n, url in enumerate(urls):  # more history for the next round to compact
                events = [
                    text("user", words(60, f"r{round_}u{n}-"), event_id=f"r{round_}u"),
                    text("agent", words(60, f"r{round_}m{n}-"), event_id=f"r{round_}m"),
                ]
                assert (
                    api.post(f"{url}/events", {"events": events}, format="json").status_code == 201
                )
            time.sleep(0.3)
        deadline = time.monotonic() + 60
        while Checkpoint.objects.filter(status__in=["pending", "running"]).exists():
            assert time.monotonic() < deadline, celery_worker_process["log"].read_text()[-3000:]
            time.sleep(0.1)
    assert sampled.highest <= 1
    assert {status for status, _ in answered} <= {202, 409}
    accepted = [a["compaction_id"] for status, a in answered if status == 202]
    assert len(accepted) >= len(urls)
    ended = dict(Checkpoint.objects.values_list("compaction_id", "status"))
    assert set(map(str, ended)) == set(accepted)
    assert set(ended.values()) <= {"active", "superseded", "failed"}
