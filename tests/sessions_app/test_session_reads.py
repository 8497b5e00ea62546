"""The two reads of a session's events (``GET .../sessions/{sid}`` and ``GET .../events``) obey
one rule: every stored event by default, as an ADK session keeps them (raw events a
compaction covers included); ``include_hidden=false`` leaves out what a checkpoint hides. A
capped session read is the tail of the event list under the same rule. And the append answer
carries the session's ``updated_at`` exactly as a following read shows it."""

from __future__ import annotations

import pytest
from django.test import override_settings

from sessions_app.models import Checkpoint, Event
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db

SESSION = f"{sessions_url('acme')}/s"


@pytest.fixture
def api(owner):
    client = owner.client()
    assert client.post(sessions_url("acme"), {"session_id": "s"}, format="json").status_code == 201
    return client


def append(api, body: dict, status: int = 201) -> dict:
    answer = api.post(f"{SESSION}/events", body, format="json")
    assert answer.status_code == status, answer.content
    return answer.json()


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


@pytest.fixture
def compacted(api):
    """Five exchanges, the first two summarised by an audit-retention checkpoint (its raw
    events stay stored, hidden)."""
    for turn in range(1, 6):
        events = [
            text("user", words(40, f"ask{turn}-"), event_id=f"u{turn}"),
            text("agent", words(40, f"reply{turn}-"), event_id=f"m{turn}"),
        ]
        append(api, {"events": events})
    done = api.post(
        f"{SESSION}/compactions", {"source_event_ids": ["u1", "m1", "u2", "m2"]}, format="json"
    )
    assert done.status_code == 201, done.content
    assert Checkpoint.objects.get().status == Checkpoint.ACTIVE
    return api


def session_ids(api, **params) -> tuple[list[str], bool]:
    answer = api.get(SESSION, params)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    return [event["event_id"] for event in body["events"]], body["events_complete"]


def listed_ids(api, **params) -> list[str]:
    ids, url, query = [], f"{SESSION}/events", {**params, "limit": 3}
    while url:
        answer = api.get(url, query)
        assert answer.status_code == 200, answer.content
        body = answer.json()
        ids += [event["event_id"] for event in body["results"]]
        url, query = body["next"], None
    return ids


def test_both_reads_return_every_stored_event_by_default(compacted):
    stored = list(Event.objects.order_by("seq").values_list("event_id", flat=True))
    hidden = {"u1", "m1", "u2", "m2"}
    assert hidden <= set(stored) and any(e.startswith("compaction-") for e in stored)
    assert session_ids(compacted) == (stored, True)
    assert listed_ids(compacted) == stored
    assert session_ids(compacted, include_hidden="true") == (stored, True)
    assert listed_ids(compacted, include_hidden="true") == stored
    visible = [event_id for event_id in stored if event_id not in hidden]
    assert session_ids(compacted, include_hidden="false") == (visible, True)
    assert listed_ids(compacted, include_hidden="false") == visible
    # num_recent_events counts within the rule.
    newest = session_ids(compacted, include_hidden="false", num_recent_events=9)
    assert newest == (visible[-9:], True)
    assert session_ids(compacted, num_recent_events=9) == (stored[-9:], True)


@pytest.mark.parametrize("include_hidden", [None, "true", "false"])
def test_a_capped_session_read_is_the_tail_of_the_list_under_the_same_rule(
    compacted, include_hidden
):
    params = {} if include_hidden is None else {"include_hidden": include_hidden}
    everything = listed_ids(compacted, **params)
    with override_settings(CTXADMIN_SESSION_EVENTS_MAX=4):
        tail, complete = session_ids(compacted, **params)
    assert complete is False
    assert tail == everything[-4:]
    # The rest, paged from the list with the same parameter, is what came before.
    first_seq = Event.objects.get(event_id=tail[0]).seq
    rest = [e for e in everything if Event.objects.get(event_id=e).seq < first_seq]
    assert rest + tail == everything


def test_include_hidden_takes_only_true_or_false(compacted):
    for url in (SESSION, f"{SESSION}/events"):
        answer = compacted.get(url, {"include_hidden": "maybe"})
        assert answer.status_code == 400, answer.content
        assert answer.json()["error"]["details"] == {"parameter": "include_hidden"}


def updated_at(api) -> str:
    return api.get(SESSION).json()["updated_at"]


def test_the_append_answer_carries_the_stored_updated_at(api):
    before = updated_at(api)
    plain = append(api, {"event": text("user", "hello", event_id="e1")})
    assert plain["updated_at"] == updated_at(api) != before
    assert plain["revision"] == 1
    # An append with app: and user: deltas takes the locking path.
    scoped = append(
        api,
        {"event": text("agent", "ok", event_id="e2", actions={"state_delta": {"app:a": 1}})},
    )
    assert scoped["updated_at"] == updated_at(api) != plain["updated_at"]
    listed = api.get(sessions_url("acme")).json()["results"]
    assert listed[0]["updated_at"] == scoped["updated_at"]
    # Nothing stored (a repeated event, a partial one): the update time stays as it was.
    again = append(api, {"event": text("user", "hello", event_id="e1")}, status=200)
    assert again["created"] == 0 and again["updated_at"] == scoped["updated_at"]
    partial = append(api, {"event": text("agent", "thinking", event_id="p1", partial=True)}, 200)
    assert partial["updated_at"] == scoped["updated_at"] == updated_at(api)
