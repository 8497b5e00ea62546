"""The console's lists read for people: app names rather than database ids, bitmasks as
words, no column wrapping over lines; the events list filters by app, session and author
and finds an event by its exact id (through indexes), never by content."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.db import connection, transaction

from sessions_app.models import Event, Session
from tests.conftest import make_operator, make_tenant
from tests.sessions_helpers import sessions_url, text

EVENTS = "/admin/sessions_app/event/"


@pytest.fixture
def operator(db, client):
    client.force_login(make_operator())
    return client


@pytest.fixture
def two_apps(db):
    for name in ("acme", "globex"):
        api = make_tenant(name).client()
        for sid in ("s1", "s2"):
            assert (
                api.post(sessions_url(name), {"session_id": sid}, format="json").status_code == 201
            )
            events = [
                text("user", "Book me a window seat", event_id=f"{name}-{sid}-e1"),
                text("travel_agent", "Done: seat 12A", event_id=f"{name}-{sid}-e2"),
            ]
            posted = api.post(
                f"{sessions_url(name)}/{sid}/events", {"events": events}, format="json"
            )
            assert posted.status_code == 201, posted.content


def _listed(page: str) -> set[str]:
    """The event ids a list page shows."""
    return set(re.findall(r"<td class=\"field-event_id\">([^<]*)</td>", page))


def test_rows_name_their_app_and_session_not_database_ids(operator, two_apps):
    page = operator.get(EVENTS).content.decode()
    session = Session.objects.get(app__name="acme", session_id="s1")
    assert f'/admin/sessions_app/session/{session.pk}/change/">acme / alice / s1</a>' in page
    assert "(app " not in page
    for model in ("checkpoint", "invocation", "compactionstate"):
        assert operator.get(f"/admin/sessions_app/{model}/").status_code == 200


def test_event_kinds_are_words(operator, two_apps):
    page = operator.get(EVENTS).content.decode()
    cells = set(re.findall(r'<td class="field-kind_words">([^<]*)</td>', page))
    assert cells == {"text", "text, model content"}, cells


def test_the_events_list_filters_by_app_session_and_author(operator, two_apps):
    every = _listed(operator.get(EVENTS).content.decode())
    assert len(every) == 8
    acme = _listed(operator.get(EVENTS, {"app": "acme"}).content.decode())
    assert acme == {f"acme-{s}-{e}" for s in ("s1", "s2") for e in ("e1", "e2")}
    session = Session.objects.get(app__name="globex", session_id="s2")
    page = operator.get(EVENTS, {"session__id__exact": session.pk}).content.decode()
    assert _listed(page) == {"globex-s2-e1", "globex-s2-e2"}
    assert "globex / alice / s2" in page  # the chosen session is named in the filter
    agent = operator.get(EVENTS, {"app": "acme", "author": "travel_agent"}).content.decode()
    assert _listed(agent) == {"acme-s1-e2", "acme-s2-e2"}
    assert re.search(r'href="\?[^"]*author=travel_agent', page)  # offered as a choice


def test_the_events_list_finds_an_event_by_its_exact_id_never_by_content(operator, two_apps):
    found = operator.get(EVENTS, {"q": "globex-s1-e2"}).content.decode()
    assert _listed(found) == {"globex-s1-e2"}
    assert _listed(operator.get(EVENTS, {"q": "globex-s1"}).content.decode()) == set()
    assert _listed(operator.get(EVENTS, {"q": "window seat"}).content.decode()) == set()


@pytest.mark.parametrize(
    ("lookup", "index"),
    [({"event_id": "acme-s1-e1"}, "event_event_id"), ({"author": "user"}, "event_author")],
)
def test_the_filters_and_the_search_have_their_index(two_apps, lookup, index):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
        plan = Event.objects.filter(**lookup).order_by("-id")[:100].explain()
    assert index in plan, plan


def test_list_columns_do_not_wrap(operator, two_apps):
    page = operator.get(EVENTS).content.decode()
    assert "ctxadmin/console.css" in page and "ctxadmin/console.js" in page
    with open(finders.find("ctxadmin/console.css")) as stylesheet:
        css = stylesheet.read()
    assert "#result_list td" in css
    assert "white-space: nowrap" in css and "text-overflow: ellipsis" in css
    with open(finders.find("ctxadmin/console.js")) as script:
        assert "cell.title" in script.read()
