"""Sessions, events and state through both clients, against the running stack."""

from __future__ import annotations

import pytest
from ctxadmin_client import (
    EventIdConflictError,
    NotFoundError,
    SessionExistsError,
    StaleSessionError,
    ValidationError,
)

pytestmark = pytest.mark.e2e


def text_event(event_id: str, author: str, text: str) -> dict:
    role = "user" if author == "user" else "model"
    return {
        "event_id": event_id,
        "invocation_id": "inv-1",
        "author": author,
        "content": {"role": role, "parts": [{"text": text}]},
    }


def test_a_session_is_created_read_and_deleted(client, app, user):
    created = client.create_session(app.name, user, session_id="s-1", state={"mood": "calm"})
    assert created["session_id"] == "s-1"
    assert created["state"]["mood"] == "calm"

    read = client.get_session(app.name, user, "s-1")
    assert read["session_id"] == "s-1" and read["events"] == []

    with pytest.raises(SessionExistsError) as taken:
        client.create_session(app.name, user, session_id="s-1")
    assert taken.value.status == 409 and taken.value.code == "session_exists"

    assert client.delete_session(app.name, user, "s-1") is None
    with pytest.raises(NotFoundError) as gone:
        client.get_session(app.name, user, "s-1")
    assert gone.value.code == "not_found"


def test_events_are_appended_listed_and_filtered(client, app, user):
    session = client.create_session(app.name, user)
    sid = session["session_id"]
    first = client.append_event(app.name, user, sid, text_event("e-0", "user", "hello"))
    assert [e["event_id"] for e in first["events"]] == ["e-0"]
    batch = client.append_events(
        app.name,
        user,
        sid,
        [text_event("e-1", "agent", "hi there"), text_event("e-2", "user", "bye")],
        expected_revision=first["revision"],
    )
    assert [e["event_id"] for e in batch["events"]] == ["e-1", "e-2"]

    listed = list(client.list_events(app.name, user, sid))
    assert [e["event_id"] for e in listed] == ["e-0", "e-1", "e-2"]
    by_user = list(client.list_events(app.name, user, sid, authors=["user"]))
    assert [e["event_id"] for e in by_user] == ["e-0", "e-2"]

    recent = client.get_session(app.name, user, sid, num_recent_events=1)
    assert [e["event_id"] for e in recent["events"]] == ["e-2"]


def test_a_stale_revision_is_a_typed_conflict_and_writes_nothing(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    appended = client.append_event(app.name, user, sid, text_event("e-0", "user", "one"))
    revision = appended["revision"]
    client.append_event(app.name, user, sid, text_event("e-1", "user", "two"))

    with pytest.raises(StaleSessionError) as stale:
        client.append_event(
            app.name, user, sid, text_event("e-2", "user", "three"), expected_revision=revision
        )
    assert stale.value.status == 409
    assert stale.value.current_revision == revision + 1
    assert stale.value.details["current_revision"] == revision + 1
    assert [e["event_id"] for e in client.list_events(app.name, user, sid)] == ["e-0", "e-1"]


def test_a_reused_event_id_with_other_content_is_a_typed_conflict(client, app, user):
    sid = client.create_session(app.name, user)["session_id"]
    client.append_event(app.name, user, sid, text_event("e-0", "user", "one"))
    again = client.append_event(app.name, user, sid, text_event("e-0", "user", "one"))
    assert [e["event_id"] for e in again["events"]] == ["e-0"]
    with pytest.raises(EventIdConflictError):
        client.append_event(app.name, user, sid, text_event("e-0", "user", "other"))


def test_bad_input_is_a_validation_error_naming_the_field(client, app, user):
    with pytest.raises(ValidationError) as refused:
        client.create_session(app.name, user, session_id="bad id")
    assert refused.value.status == 400
    assert refused.value.code == "validation_error"
    assert refused.value.details.get("field")


def test_state_scopes_are_read_back(client, app, user):
    sid = client.create_session(
        app.name, user, state={"plain": 1, "user:lang": "fr", "app:tier": "gold"}
    )["session_id"]
    session_state = client.get_session_state(app.name, user, sid)
    assert session_state["state"]["plain"] == 1
    assert session_state["state"]["user:lang"] == "fr"
    user_state = client.get_user_state(app.name, user)
    assert user_state["state"]["user:lang"] == "fr"
    assert user_state["state"]["app:tier"] == "gold"


def test_state_keys_are_removed_by_state_remove(client, app, user):
    sid = client.create_session(app.name, user, state={"plain": 1, "user:lang": "fr"})["session_id"]
    appended = client.append_event(
        app.name, user, sid, text_event("e-0", "user", "bye"), state_remove=["plain", "user:lang"]
    )
    assert "plain" not in appended["state"] and "user:lang" not in appended["state"]
    assert "user:lang" not in client.get_user_state(app.name, user)["state"]


def test_lists_follow_the_cursor_across_pages(client, app, user):
    made = [
        client.create_session(app.name, user, session_id=f"p-{i}")["session_id"] for i in range(5)
    ]
    listed = [s["session_id"] for s in client.list_user_sessions(app.name, user, limit=2)]
    assert sorted(listed) == sorted(made)
    assert len(listed) == len(set(listed)) == 5

    sid = made[0]
    client.append_events(
        app.name, user, sid, [text_event(f"e-{i}", "user", f"text {i}") for i in range(7)]
    )
    paged = [e["event_id"] for e in client.list_events(app.name, user, sid, limit=3)]
    assert paged == [f"e-{i}" for i in range(7)]


def test_the_app_wide_session_list(client, app, user):
    made = [client.create_session(app.name, user, state={"n": i})["session_id"] for i in range(3)]
    listed = list(client.list_sessions(app.name, user_id=user, include_state=True, limit=2))
    assert sorted(s["session_id"] for s in listed) == sorted(made)
    assert all("state" in s for s in listed)
    ascending = [s["session_id"] for s in client.list_sessions(app.name, user_id=user, order="asc")]
    descending = [
        s["session_id"] for s in client.list_sessions(app.name, user_id=user, order="desc")
    ]
    assert ascending == list(reversed(descending))
