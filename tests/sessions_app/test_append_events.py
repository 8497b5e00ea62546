"""Appending events: validation, idempotency, compare-and-append, and concurrency."""

from __future__ import annotations

import base64
import threading
from datetime import datetime

import pytest
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from sessions_app.models import Event, Session
from tests.conftest import make_tenant
from tests.sessions_helpers import call, response, sessions_url, text


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


EVENTS = f"{sessions_url('acme')}/s/events"


def post(api, body, status=None):
    result = api.post(EVENTS, body, format="json")
    if status is not None:
        assert result.status_code == status, result.content
    return result


@pytest.mark.django_db
class TestAppend:
    def test_single_event_gets_server_fields(self, api):
        body = post(api, {"event": text("user", "hello", event_id="e-1")}, 201).json()
        [event] = body["events"]
        assert event["seq"] == 1 and event["event_id"] == "e-1" and event["stored"] is True
        assert event["byte_size"] > 0 and event["token_estimate"] == -(-event["byte_size"] // 4)
        assert len(event["content_hash"]) == 64
        assert body["revision"] == 1 and body["created"] == 1

    def test_batch_assigns_monotonic_seq(self, api):
        body = post(api, {"events": [text("user", f"m{i}") for i in range(5)]}, 201).json()
        assert [event["seq"] for event in body["events"]] == [1, 2, 3, 4, 5]
        assert body["revision"] == 1
        more = post(api, {"event": text("user", "m5")}, 201).json()
        assert more["events"][0]["seq"] == 6 and more["revision"] == 2

    def test_every_part_kind_is_accepted(self, api):
        parts = [
            {"text": "see"},
            {
                "inline_data": {
                    "mime_type": "image/png",
                    "data": base64.b64encode(b"\x89PNG").decode(),
                }
            },
            {"file_data": {"mime_type": "application/pdf", "file_uri": "gs://bucket/doc.pdf"}},
        ]
        event = {"author": "user", "content": {"role": "user", "parts": parts}}
        stored = post(api, {"event": event}, 201).json()["events"][0]
        assert stored["content"]["parts"] == parts

    def test_idempotent_resend_returns_the_stored_event(self, api):
        first = post(api, {"event": text("user", "once", event_id="dup")}, 201).json()
        again = post(api, {"event": text("user", "once", event_id="dup")}, 200).json()
        assert again["events"] == first["events"]
        assert again["created"] == 0 and again["revision"] == first["revision"]
        assert Event.objects.count() == 1

    @pytest.mark.parametrize(
        "timestamp",
        ["2026-01-02T03:04:05.930Z", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.1+02:00"],
    )
    def test_the_append_response_and_later_reads_show_one_timestamp(self, api, timestamp):
        sent = text("user", "when", event_id="t", timestamp=timestamp)
        stored = post(api, {"event": sent}, 201).json()["events"][0]
        again = post(api, {"event": sent}, 200).json()["events"][0]
        listed = api.get(EVENTS).json()["results"][0]
        assert stored["timestamp"] == again["timestamp"] == listed["timestamp"]
        assert datetime.fromisoformat(stored["timestamp"]) == datetime.fromisoformat(
            timestamp.replace("Z", "+00:00")
        )

    def test_same_id_other_content_conflicts_and_writes_nothing(self, api):
        post(api, {"event": text("user", "once", event_id="dup")}, 201)
        conflict = post(
            api, {"events": [text("user", "new"), text("user", "other", event_id="dup")]}, 409
        )
        assert conflict.json()["error"]["code"] == "event_id_conflict"
        assert conflict.json()["error"]["details"] == {"event_id": "dup"}
        assert Event.objects.count() == 1
        assert Session.objects.get().revision == 1

    def test_partial_events_are_validated_but_not_stored(self, api):
        body = post(api, {"event": text("model", "typing…", partial=True)}, 200).json()
        assert body["events"][0]["stored"] is False and body["events"][0]["seq"] is None
        assert body["created"] == 0 and not Event.objects.exists()
        bad = post(
            api, {"event": {"author": "model", "partial": True, "content": {"parts": {}}}}, 400
        )
        assert bad.json()["error"]["details"]["field"] == "event.content.parts"

    def test_a_batch_is_all_or_nothing(self, api):
        bad = post(
            api,
            {
                "events": [
                    text("user", "ok"),
                    {"author": "user", "content": {"role": "user", "parts": [{"txt": "x"}]}},
                ]
            },
            400,
        )
        assert bad.json()["error"]["details"]["field"] == "events[1].content.parts[0].txt"
        assert not Event.objects.exists()

    @pytest.mark.parametrize(
        ("event", "field"),
        [
            ({"content": {"role": "user", "parts": [{"text": "x"}]}}, "event.author"),
            ({"author": "u", "colour": 1}, "event.colour"),
            (
                {
                    "author": "u",
                    "content": {"role": "user", "parts": [{"text": "a", "function_call": {}}]},
                },
                "event.content.parts[0]",
            ),
            (
                {
                    "author": "u",
                    "content": {"role": "model", "parts": [{"function_call": {"name": "f"}}]},
                },
                "event.content.parts[0].function_call.id",
            ),
            (
                {
                    "author": "u",
                    "content": {
                        "role": "user",
                        "parts": [{"inline_data": {"mime_type": "image/png", "data": "***"}}],
                    },
                },
                "event.content.parts[0].inline_data.data",
            ),
            ({"author": "u", "timestamp": "2026-01-01T00:00:00"}, "event.timestamp"),
            (
                {"author": "u", "actions": {"state_delta": {"app:": 1}}},
                "event.actions.state_delta.app:",
            ),
            ({"author": "u", "actions": {"rewind": True}}, "event.actions.rewind"),
            (
                {"author": "u", "usage_metadata": {"prompt_token_count": -1}},
                "event.usage_metadata.prompt_token_count",
            ),
            ({"author": "u", "event_id": "../../etc"}, "event.event_id"),
        ],
    )
    def test_invalid_events_name_the_field(self, api, event, field):
        result = post(api, {"event": event}, 400)
        assert result.json()["error"]["code"] == "validation_error"
        assert result.json()["error"]["details"]["field"] == field

    @pytest.mark.parametrize(
        "body",
        [
            {},
            {"event": {}, "events": []},
            {"events": []},
            {"events": {"a": 1}},
            {"event": {"author": "u"}, "expected_revision": -1},
        ],
    )
    def test_malformed_append_bodies(self, api, body):
        assert post(api, body, 400).json()["error"]["code"] == "validation_error"

    @override_settings(CTXADMIN_MAX_BATCH_EVENTS=3)
    def test_batch_limit(self, api):
        result = post(api, {"events": [text("user", "x")] * 4}, 400)
        assert "1 to 3" in result.json()["error"]["message"]

    @override_settings(CTXADMIN_MAX_INLINE_DATA_BYTES=16)
    def test_inline_data_limit(self, api):
        data = base64.b64encode(b"x" * 17).decode()
        event = {
            "author": "u",
            "content": {
                "role": "user",
                "parts": [{"inline_data": {"mime_type": "image/png", "data": data}}],
            },
        }
        assert "more than 16 bytes" in post(api, {"event": event}, 400).json()["error"]["message"]

    def test_repeated_event_id_in_a_batch(self, api):
        result = post(
            api, {"events": [text("user", "a", event_id="x"), text("user", "b", event_id="x")]}, 400
        )
        assert result.json()["error"]["details"]["field"] == "events[1].event_id"

    def test_unknown_session_is_404(self, api):
        result = api.post(
            f"{sessions_url('acme')}/nope/events", {"event": text("user", "x")}, format="json"
        )
        assert result.status_code == 404


@pytest.mark.django_db
def test_a_stale_writer_is_rejected_with_nothing_written(api):
    post(api, {"event": text("user", "a")}, 201)
    stale = post(
        api,
        {"event": text("user", "b", actions={"state_delta": {"k": 1}}), "expected_revision": 0},
        409,
    )
    error = stale.json()["error"]
    assert error["code"] == "stale_session"
    assert error["details"] == {"expected_revision": 0, "current_revision": 1}
    session = Session.objects.get()
    assert session.event_count == 1 and session.state == {} and session.revision == 1
    post(api, {"event": text("user", "b"), "expected_revision": 1}, 201)


@pytest.mark.django_db
class TestStateLimits:
    """State sizes are canonical JSON bytes, checked after the merge; nothing half-applies."""

    def delta(self, size: int) -> dict:
        # {"k":"xx..."}: canonical size = 8 + len(value)
        return {"k": "x" * (size - 8)}

    @override_settings(CTXADMIN_MAX_STATE_BYTES=100)
    def test_a_session_state_at_the_limit_is_stored(self, api):
        post(api, {"event": text("user", "a", actions={"state_delta": self.delta(100)})}, 201)
        assert Session.objects.get().state == self.delta(100)

    @override_settings(CTXADMIN_MAX_STATE_BYTES=100)
    def test_a_session_state_over_the_limit_writes_nothing(self, api):
        post(api, {"event": text("user", "a", actions={"state_delta": {"a": 1}})}, 201)
        error = post(
            api, {"event": text("user", "b", actions={"state_delta": self.delta(101)})}, 422
        ).json()["error"]
        assert error["code"] == "state_too_large"
        assert error["details"] == {"scope": "session state", "limit_bytes": 100}
        session = Session.objects.get()
        assert session.state == {"a": 1} and session.event_count == 1 and session.revision == 1

    @override_settings(CTXADMIN_MAX_STATE_BYTES=100)
    @pytest.mark.parametrize(("prefix", "scope"), [("app:", "app state"), ("user:", "user state")])
    def test_an_app_or_user_state_over_the_limit_writes_nothing(self, api, prefix, scope):
        big = {f"{prefix}k": "x" * 100}
        error = post(api, {"event": text("user", "b", actions={"state_delta": big})}, 422)
        assert error.json()["error"]["details"]["scope"] == scope
        assert Event.objects.count() == 0
        state = api.get(f"{sessions_url('acme')}/s").json()["state"]
        assert state == {}


@pytest.mark.django_db
def test_a_plain_append_is_one_statement_after_the_key_lookup(api):
    post(api, {"event": text("user", "warm")}, 201)  # the key's last use is recorded once
    with CaptureQueriesContext(connections["default"]) as queries:
        post(
            api,
            {
                "events": [
                    text("user", "a", actions={"state_delta": {"topic": "t", "temp:x": 1}}),
                    call("c1"),
                    response("c1"),
                ]
            },
            201,
        )
    # Inside the test's transaction the statement runs in a savepoint (two more statements).
    statements = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(statements) == 2, statements
    assert "FROM ctxadmin_apikey" in statements[0]
    assert "INSERT INTO sessions_app_event" in statements[1]


@pytest.mark.django_db
class TestEventList:
    @pytest.fixture
    def seeded(self, api):
        post(
            api,
            {
                "events": [
                    text("user", "q", invocation_id="inv-1"),
                    call("c1", invocation_id="inv-1"),
                    response("c1", invocation_id="inv-1"),
                    text("agent", "a", invocation_id="inv-1"),
                    text("user", "q2", invocation_id="inv-2"),
                ]
            },
            201,
        )
        return api

    def seqs(self, api, query):
        result = api.get(f"{EVENTS}?{query}")
        assert result.status_code == 200, result.content
        return [event["seq"] for event in result.json()["results"]]

    def test_pages_in_seq_order(self, seeded):
        seen, url = [], f"{EVENTS}?limit=2"
        while url:
            body = seeded.get(url).json()
            seen += [event["seq"] for event in body["results"]]
            url = body["next"]
        assert seen == [1, 2, 3, 4, 5]

    def test_filters(self, seeded):
        assert self.seqs(seeded, "authors=user") == [1, 5]
        assert self.seqs(seeded, "exclude_authors=user,tool") == [2, 4]
        assert self.seqs(seeded, "invocation_ids=inv-2") == [5]
        assert self.seqs(seeded, "content_types=function_call,function_response") == [2, 3]
        assert self.seqs(seeded, "exclude_content_types=model_content") == [1, 3, 5]
        assert self.seqs(seeded, "final_only=true") == [1, 4, 5]
        assert self.seqs(seeded, "include_hidden=true") == [1, 2, 3, 4, 5]

    def test_bad_filter_values(self, seeded):
        assert seeded.get(f"{EVENTS}?content_types=video").status_code == 400
        assert seeded.get(f"{EVENTS}?final_only=maybe").status_code == 400
        assert seeded.get(f"{EVENTS}?order=desc").json()["error"]["code"] == "unknown_parameter"


def _threads(count, target):
    errors: list[BaseException] = []

    def run(index):
        try:
            target(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors


@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_appenders_lose_nothing():
    tenant = make_tenant("race")
    client = tenant.client()
    url = sessions_url("race")
    assert client.post(url, {"session_id": "s"}, format="json").status_code == 201
    barrier = threading.Barrier(16)

    def append(index):
        mine = tenant.client()
        barrier.wait()
        event = text(
            "user",
            f"m{index}",
            actions={"state_delta": {f"k{index}": index, f"user:u{index}": index}},
        )
        result = mine.post(f"{url}/s/events", {"event": event}, format="json")
        assert result.status_code == 201, result.content

    _threads(16, append)
    session = Session.objects.get(app=tenant.app)
    assert session.event_count == 16 and session.revision == 16
    assert sorted(Event.objects.filter(session=session).values_list("seq", flat=True)) == list(
        range(1, 17)
    )
    assert session.state == {f"k{i}": i for i in range(16)}
    user_state = client.get("/api/v1/apps/race/users/alice/state").json()["state"]
    assert user_state == {f"user:u{i}": i for i in range(16)}


@pytest.mark.django_db(transaction=True)
def test_two_writers_with_the_same_revision_one_wins_each_round():
    tenant = make_tenant("cas")
    url = sessions_url("cas")
    assert tenant.client().post(url, {"session_id": "s"}, format="json").status_code == 201
    for round_number in range(8):
        revision = Session.objects.get(app=tenant.app).revision
        barrier = threading.Barrier(2)
        codes: list[int] = []

        def write(
            index, revision=revision, barrier=barrier, codes=codes, round_number=round_number
        ):
            client = tenant.client()
            barrier.wait()
            body = {
                "event": text("user", f"r{round_number}w{index}"),
                "expected_revision": revision,
            }
            codes.append(client.post(f"{url}/s/events", body, format="json").status_code)

        _threads(2, write)
        assert sorted(codes) == [201, 409], (round_number, codes)
    session = Session.objects.get(app=tenant.app)
    assert session.revision == 8 and session.event_count == 8


@pytest.mark.django_db(transaction=True)
def test_one_event_id_sent_concurrently_is_stored_once():
    tenant = make_tenant("dupes")
    url = sessions_url("dupes")
    assert tenant.client().post(url, {"session_id": "s"}, format="json").status_code == 201
    barrier = threading.Barrier(8)
    codes: list[int] = []

    def send(index):
        client = tenant.client()
        barrier.wait()
        body = {"event": text("user", "same", event_id="retry-1")}
        codes.append(client.post(f"{url}/s/events", body, format="json").status_code)

    _threads(8, send)
    assert sorted(codes) == [200] * 7 + [201]
    session = Session.objects.get(app=tenant.app)
    assert session.event_count == 1 and session.revision == 1
