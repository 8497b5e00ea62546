"""A session's console page links to its events, checkpoints and invocations, each list
narrowed to that session."""

from __future__ import annotations

import pytest

from sessions_app.models import Event, Session
from tests.conftest import make_operator
from tests.sessions_helpers import sessions_url, text


@pytest.fixture
def operator(db, client):
    client.force_login(make_operator())
    return client


def test_a_sessions_page_links_to_its_own_rows(operator, owner):
    api = owner.client()
    for sid in ("s1", "s2"):
        assert api.post(sessions_url("acme"), {"session_id": sid}, format="json").status_code == 201
        events = [text("user", f"hello {sid}", event_id=f"{sid}-e1")]
        posted = api.post(f"{sessions_url('acme')}/{sid}/events", {"events": events}, format="json")
        assert posted.status_code == 201, posted.content
    session = Session.objects.get(session_id="s1")
    page = operator.get(f"/admin/sessions_app/session/{session.pk}/change/").content.decode()
    for model in ("event", "checkpoint", "invocation"):
        link = f"/admin/sessions_app/{model}/?session__id__exact={session.pk}"
        assert link in page, model
        listed = operator.get(link)
        assert listed.status_code == 200, model
    events = operator.get(f"/admin/sessions_app/event/?session__id__exact={session.pk}")
    mine = Event.objects.get(session=session).pk
    theirs = Event.objects.exclude(session=session).get().pk
    html = events.content.decode()
    assert f"/admin/sessions_app/event/{mine}/change/" in html
    assert f"/admin/sessions_app/event/{theirs}/change/" not in html
