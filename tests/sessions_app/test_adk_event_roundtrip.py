"""Every ADK ``Event`` round-trips: appended as ADK dumps it, read back by both reads."""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest
from google.adk.events import Event
from hypothesis import HealthCheck, given, settings

from tests.sessions_app.adk_strategies import EVENTS
from tests.sessions_helpers import sessions_url

# ctxadmin's own fields of a stored event (not ADK's).
SERVER_FIELDS = ("seq", "byte_size", "token_estimate", "content_hash", "stored")
_sessions = itertools.count(1)


def as_adk(stored: dict) -> dict:
    """A stored event in ADK's names: ``event_id`` is ADK's ``id``, the timestamp seconds
    since the epoch, ctxadmin's own fields and absent (null) fields left out."""
    event = {k: v for k, v in stored.items() if k not in SERVER_FIELDS and v is not None}
    event["id"] = event.pop("event_id")
    event["timestamp"] = datetime.fromisoformat(event["timestamp"]).timestamp()
    return event


@pytest.mark.django_db
@settings(
    max_examples=80,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(original=EVENTS)
def test_every_adk_event_round_trips(owner, original):
    client = owner.client()
    session = f"adk-{next(_sessions)}"
    base = f"{sessions_url('acme')}/{session}"
    assert (
        client.post(sessions_url("acme"), {"session_id": session}, format="json").status_code == 201
    )
    sent = original.model_dump(mode="json", exclude_none=True)
    sent["event_id"] = sent.pop("id")
    appended = client.post(f"{base}/events", {"event": sent}, format="json")
    assert appended.status_code == 201, appended.content
    listed = client.get(f"{base}/events").json()["results"]
    whole = client.get(base).json()["events"]
    sent["id"] = sent.pop("event_id")
    # What ADK reads back of its own dump (ADK re-parses some values, e.g. auth schemes).
    expected = Event.model_validate(sent)
    for stored in (appended.json()["events"][0], listed[0], whole[0]):
        assert as_adk(stored) == sent
        assert Event.model_validate(as_adk(stored)) == expected
        if expected == original:
            assert Event.model_validate(as_adk(stored)) == original
