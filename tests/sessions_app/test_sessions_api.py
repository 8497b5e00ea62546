"""Sessions and state scopes over the REST API (ADK semantics, with its pain points fixed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sessions_app.models import Event, Session
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(owner):
    return owner.client()


def create(api, app="acme", user="alice", **body):
    response = api.post(sessions_url(app, user), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def append(api, sid, *events, user="alice", expected=None, status=201):
    body = {"events": list(events)}
    if expected is not None:
        body["expected_revision"] = expected
    response = api.post(f"{sessions_url('acme', user)}/{sid}/events", body, format="json")
    assert response.status_code == status, response.content
    return response.json()


def test_create_with_client_id_and_conflict(api):
    created = create(api, session_id="chat-1", state={"step": 1})
    assert created["session_id"] == "chat-1"
    assert created["state"] == {"step": 1}
    again = api.post(sessions_url("acme"), {"session_id": "chat-1"}, format="json")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "session_exists"


def test_generated_session_id(api):
    created = create(api)
    assert len(created["session_id"]) == 32


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"session_id": "../x"}, "session_id"),
        ({"session_id": 5}, "session_id"),
        ({"state": []}, "state"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_create_validation(api, body, field):
    response = api.post(sessions_url("acme"), body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == field
    assert not Session.objects.exists()


def test_state_scopes_follow_adk(api):
    create(
        api, session_id="a1", state={"mine": 1, "app:theme": "dark", "user:lang": "fr", "temp:x": 9}
    )
    append(
        api,
        "a1",
        text(
            "user",
            "hi",
            actions={
                "state_delta": {"app:plan": "pro", "user:tz": "CET", "temp:scratch": 1, "n": 2}
            },
        ),
    )
    # Same user, another session: app: and user: keys, not the other session's keys.
    second = create(api, session_id="a2")
    assert second["state"] == {
        "app:theme": "dark",
        "app:plan": "pro",
        "user:lang": "fr",
        "user:tz": "CET",
    }
    # Another user of the app: app: keys only.
    bob = create(api, user="bob", session_id="b1")
    assert bob["state"] == {"app:theme": "dark", "app:plan": "pro"}
    # temp: keys were never stored anywhere.
    session = Session.objects.get(session_id="a1")
    assert session.state == {"mine": 1, "n": 2}
    stored = Event.objects.get(session=session)
    assert stored.actions == {"state_delta": {"app:plan": "pro", "user:tz": "CET", "n": 2}}
    full = api.get(f"{sessions_url('acme')}/a1").json()
    assert not any(key.startswith("temp:") for key in full["state"])


def test_temp_keys_appear_only_in_the_response_of_their_append(api):
    create(api, session_id="t1")
    first = append(api, "t1", text("user", "a", actions={"state_delta": {"temp:t": 1}}))
    assert first["state"]["temp:t"] == 1
    second = append(api, "t1", text("user", "b"))
    assert "temp:t" not in second["state"]


def test_a_null_is_a_stored_null_and_state_remove_removes_keys_of_every_scope(api):
    create(api, session_id="r1", state={"k": 1, "gone": 2, "user:seat": "aisle", "app:m": "x"})
    nulled = append(api, "r1", text("user", "a", actions={"state_delta": {"k": None}}))
    assert "k" in nulled["state"] and nulled["state"]["k"] is None  # ADK: null is a value
    url = f"{sessions_url('acme')}/r1/events"
    body = {
        "event": {
            **text("user", "b", actions={"state_delta": {"gone": 3, "new": 4}}),
            "event_id": "e-remove",
        },
        "state_remove": ["gone", "user:seat", "app:m", "k", "absent"],
    }
    removed = api.post(url, body, format="json")
    assert removed.status_code == 201, removed.content
    assert removed.json()["state"] == {"new": 4}
    assert api.get(f"{sessions_url('acme')}/r1").json()["state"] == {"new": 4}
    assert api.get("/api/v1/apps/acme/users/alice/state").json()["state"] == {}
    # A re-send of the stored event removes nothing more.
    again = api.post(url, {**body, "state_remove": ["new"]}, format="json")
    assert again.status_code == 200 and again.json()["state"] == {"new": 4}


@pytest.mark.parametrize(
    ("state_remove", "field"),
    [
        (["temp:x"], "state_remove[0]"),
        (["k", "user:"], "state_remove[1]"),
        ([""], "state_remove[0]"),
        (["x" * 257], "state_remove[0]"),
        ("k", "state_remove"),
        ([1], "state_remove"),
        ([f"k{i}" for i in range(257)], "state_remove"),
    ],
)
def test_state_remove_is_checked_and_nothing_half_applies(api, state_remove, field):
    create(api, session_id="r1", state={"k": 1})
    body = {"event": text("user", "a"), "state_remove": state_remove}
    response = api.post(f"{sessions_url('acme')}/r1/events", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"]["field"] == field
    assert not Event.objects.exists()
    assert Session.objects.get().state == {"k": 1}


def test_user_state_is_readable_before_any_session(api, owner):
    empty = api.get("/api/v1/apps/acme/users/carol/state")
    assert empty.status_code == 200
    assert empty.json() == {"app": "acme", "user_id": "carol", "state": {}}
    create(api, user="carol", state={"user:vip": True, "app:motd": "hi"})
    api.delete(f"{sessions_url('acme', 'carol')}/{Session.objects.get().session_id}")
    state = api.get("/api/v1/apps/acme/users/carol/state").json()["state"]
    assert state == {"user:vip": True, "app:motd": "hi"}


def test_delete_removes_events_but_keeps_app_and_user_state(api):
    create(api, session_id="d1", state={"user:k": 1})
    append(api, "d1", text("user", "a"), text("model", "b"))
    assert api.delete(f"{sessions_url('acme')}/d1").status_code == 204
    assert not Event.objects.exists()
    assert api.get(f"{sessions_url('acme')}/d1").status_code == 404
    assert api.delete(f"{sessions_url('acme')}/d1").status_code == 404
    assert api.get("/api/v1/apps/acme/users/alice/state").json()["state"] == {"user:k": 1}


class TestGetSessionFilters:
    """num_recent_events and after_timestamp on 5 events (ADK semantics)."""

    @pytest.fixture
    def sid(self, api):
        create(api, session_id="five")
        base = datetime(2026, 1, 1, tzinfo=UTC)
        events = [
            text("user", f"m{i}", timestamp=(base + timedelta(minutes=i)).isoformat())
            for i in range(5)
        ]
        append(api, "five", *events)
        return "five"

    def texts(self, api, sid, query=""):
        body = api.get(f"{sessions_url('acme')}/{sid}{query}").json()
        return [event["content"]["parts"][0]["text"] for event in body["events"]]

    def test_all(self, api, sid):
        assert self.texts(api, sid) == ["m0", "m1", "m2", "m3", "m4"]

    def test_zero_means_none(self, api, sid):
        assert self.texts(api, sid, "?num_recent_events=0") == []

    def test_newest_n(self, api, sid):
        assert self.texts(api, sid, "?num_recent_events=2") == ["m3", "m4"]
        assert self.texts(api, sid, "?num_recent_events=9") == ["m0", "m1", "m2", "m3", "m4"]

    def test_after_timestamp_is_inclusive(self, api, sid):
        assert self.texts(api, sid, "?after_timestamp=2026-01-01T00:02:00Z") == ["m2", "m3", "m4"]
        epoch = datetime(2026, 1, 1, 0, 3, tzinfo=UTC).timestamp()
        assert self.texts(api, sid, f"?after_timestamp={epoch}") == ["m3", "m4"]

    def test_both_compose(self, api, sid):
        query = "?after_timestamp=2026-01-01T00:01:00Z&num_recent_events=2"
        assert self.texts(api, sid, query) == ["m3", "m4"]
        query = "?after_timestamp=2026-01-01T00:04:00Z&num_recent_events=3"
        assert self.texts(api, sid, query) == ["m4"]
        query = "?after_timestamp=2026-01-01T00:01:00Z&num_recent_events=0"
        assert self.texts(api, sid, query) == []

    @pytest.mark.parametrize(
        "query",
        ["?num_recent_events=-1", "?num_recent_events=x", "?after_timestamp=yesterday", "?limit=3"],
    )
    def test_bad_parameters(self, api, sid, query):
        response = api.get(f"{sessions_url('acme')}/{sid}{query}")
        assert response.status_code == 400
        assert response.json()["error"]["code"] in {"invalid_parameter", "unknown_parameter"}


def test_list_is_paginated_newest_activity_first(api):
    for index in range(5):
        create(api, session_id=f"s{index}")
    append(api, "s1", text("user", "touch"))  # s1 becomes the most recently active
    seen, url = [], f"{sessions_url('acme')}?limit=2"
    while url:
        body = api.get(url).json()
        assert "events" not in body["results"][0]
        seen += [item["session_id"] for item in body["results"]]
        url = body["next"]
    assert seen[0] == "s1"
    assert sorted(seen) == ["s0", "s1", "s2", "s3", "s4"]
    assert len(seen) == 5


def test_list_shows_only_that_users_sessions(api):
    create(api, user="alice", session_id="x")
    create(api, user="bob", session_id="y")
    body = api.get(sessions_url("acme", "bob")).json()
    assert [item["session_id"] for item in body["results"]] == ["y"]


def test_invalid_user_segment(api):
    response = api.get("/api/v1/apps/acme/users/-bad/sessions")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"parameter": "user"}


def test_get_returns_at_most_the_cap_and_says_so(api, settings):
    settings.CTXADMIN_SESSION_EVENTS_MAX = 3
    create(api, session_id="cap")
    append(api, "cap", *[text("user", f"m{i}") for i in range(5)])
    body = api.get(f"{sessions_url('acme')}/cap").json()
    assert [e["content"]["parts"][0]["text"] for e in body["events"]] == ["m2", "m3", "m4"]
    assert body["events_complete"] is False
    recent = api.get(f"{sessions_url('acme')}/cap?num_recent_events=2").json()
    assert recent["events_complete"] is True and len(recent["events"]) == 2
