"""Appends lock only what they must: their own session row, and the app/user state rows
only when an event carries such keys."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connections

from sessions_app.models import AppState, Session, UserState
from tests.conftest import database_url_for_current_connection, make_tenant
from tests.sessions_helpers import sessions_url, text


def append_in_thread(tenant, sid, event, results):
    def run():
        try:
            response = tenant.client().post(
                f"{sessions_url(tenant.app.name)}/{sid}/events", {"event": event}, format="json"
            )
            results.append(response.status_code)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.fixture
def tenant():
    tenant = make_tenant("locks")
    client = tenant.client()
    for sid in ("a", "b"):
        state = {"user:seen": 0, "app:seen": 0}
        client.post(sessions_url("locks"), {"session_id": sid, "state": state}, format="json")
    return tenant


def hold_lock(*statements: tuple[str, list]):
    """A second connection holding row locks until it is closed."""
    holder = psycopg.connect(database_url_for_current_connection())
    for sql, params in statements:
        holder.execute(sql, params)
    return holder


@pytest.mark.django_db(transaction=True)
def test_an_append_does_not_wait_for_another_sessions_lock(tenant):
    a = Session.objects.get(session_id="a")
    holder = hold_lock(("SELECT 1 FROM sessions_app_session WHERE id = %s FOR UPDATE", [a.pk]))
    try:
        results: list[int] = []
        thread = append_in_thread(tenant, "b", text("user", "hi"), results)
        thread.join(10)
        assert not thread.is_alive() and results == [201]
        # ... while an append to the locked session waits for it.
        waiting: list[int] = []
        blocked = append_in_thread(tenant, "a", text("user", "hi"), waiting)
        blocked.join(1)
        assert blocked.is_alive() and waiting == []
    finally:
        holder.close()
    blocked.join(10)
    assert waiting == [201]


@pytest.mark.django_db(transaction=True)
def test_state_rows_are_locked_only_by_events_that_change_them(tenant):
    user_row = UserState.objects.get(app=tenant.app, user_id="alice")
    app_row = AppState.objects.get(app=tenant.app)
    holder = hold_lock(
        ("SELECT 1 FROM sessions_app_userstate WHERE id = %s FOR UPDATE", [user_row.pk]),
        ("SELECT 1 FROM sessions_app_appstate WHERE id = %s FOR UPDATE", [app_row.pk]),
    )
    try:
        results: list[int] = []
        plain = append_in_thread(tenant, "a", text("user", "no scope keys"), results)
        plain.join(10)
        assert not plain.is_alive() and results == [201]
        waiting: list[int] = []
        event = text("user", "bump", actions={"state_delta": {"user:seen": 1}})
        scoped = append_in_thread(tenant, "b", event, waiting)
        scoped.join(1)
        assert scoped.is_alive() and waiting == []
    finally:
        holder.close()
    scoped.join(10)
    assert waiting == [201]
    user_row.refresh_from_db()
    assert user_row.state == {"seen": 1}
