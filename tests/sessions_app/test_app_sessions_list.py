"""``GET /apps/{app}/sessions``: the app's sessions of every user (ADK's ``list_sessions``
without a user), by cursor in either order of last update, filtered to one user on demand,
each with its merged state on ``include=state`` — and the per-user list's same parameters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.models import Session
from tests.sessions_helpers import sessions_url, text

pytestmark = pytest.mark.django_db

LIST = "/api/v1/apps/acme/sessions"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# (user, session, seconds after T0): two sessions share a time, to page across a tie.
SESSIONS = [
    ("bob", "b1", 5),
    ("alice", "a1", 1),
    ("carol", "c1", 3),
    ("alice", "a2", 3),
    ("bob", "b2", 0),
    ("alice", "a3", 9),
    ("carol", "c2", 7),
]


@pytest.fixture
def acme(owner):
    api = owner.client()
    for user, sid, seconds in SESSIONS:
        created = api.post(sessions_url("acme", user), {"session_id": sid}, format="json")
        assert created.status_code == 201, created.content
        Session.objects.filter(app=owner.app, user_id=user, session_id=sid).update(
            updated_at=T0 + timedelta(seconds=seconds)
        )
    return api


def expected(order: str, user: str | None = None) -> list[tuple[str, str]]:
    rows = Session.objects.filter(app__name="acme").order_by("updated_at", "id")
    if user is not None:
        rows = rows.filter(user_id=user)
    pairs = [(row.user_id, row.session_id) for row in rows]
    return pairs if order == "asc" else pairs[::-1]


def walk(api, url: str, params: dict) -> list[dict]:
    """Every row of the list, following ``next`` page by page."""
    answer = api.get(url, params)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    rows = list(body["results"])
    while body["next"]:
        assert len(body["results"]) == params.get("limit", len(body["results"]))
        answer = api.get(body["next"])
        assert answer.status_code == 200, answer.content
        body = answer.json()
        rows += body["results"]
    return rows


def pairs(rows: list[dict]) -> list[tuple[str, str]]:
    return [(row["user_id"], row["session_id"]) for row in rows]


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_every_users_sessions_page_by_last_update(acme, outsider, order):
    other = outsider.client()
    assert other.post(sessions_url("globex"), {"session_id": "g1"}, format="json").status_code
    rows = walk(acme, LIST, {"limit": 2, "order": order})
    assert pairs(rows) == expected(order)
    assert len(rows) == len(SESSIONS)  # none twice, none of globex's
    times = [row["updated_at"] for row in rows]
    assert times == sorted(times, reverse=order == "desc")
    assert set(rows[0]) == {
        "session_id",
        "user_id",
        "revision",
        "event_count",
        "created_at",
        "updated_at",
    }
    assert pairs(walk(other, "/api/v1/apps/globex/sessions", {})) == [("alice", "g1")]


def test_oldest_first_by_default_as_adk_lists(acme):
    assert pairs(walk(acme, LIST, {})) == expected("asc")
    # The per-user list keeps newest first by default, and takes the same order parameter.
    user_list = sessions_url("acme", "alice")
    assert pairs(walk(acme, user_list, {})) == expected("desc", "alice")
    assert pairs(walk(acme, user_list, {"order": "asc", "limit": 1})) == expected("asc", "alice")


def test_an_append_moves_a_session_to_the_newest_end(acme):
    appended = acme.post(
        f"{sessions_url('acme', 'bob')}/b2/events", {"event": text("user", "hi")}, format="json"
    )
    assert appended.status_code == 201, appended.content
    assert pairs(walk(acme, LIST, {"limit": 3}))[-1] == ("bob", "b2")
    assert pairs(walk(acme, LIST, {"order": "desc"}))[0] == ("bob", "b2")


def test_the_user_id_filter(acme):
    for user in ("alice", "bob", "carol", "nobody"):
        for order in ("asc", "desc"):
            rows = walk(acme, LIST, {"user_id": user, "order": order, "limit": 1})
            assert pairs(rows) == expected(order, user)
    for bad in ("", "a b", "../x", "x" * 129, "caf\u00e9"):
        answer = acme.get(LIST, {"user_id": bad})
        assert answer.status_code == 400, (bad, answer.content)
        error = answer.json()["error"]
        assert error["code"] == "invalid_parameter"
        assert error["details"] == {"parameter": "user_id"}
        assert error["message"].startswith("user_id must be 1-128 characters")


def test_include_state_merges_each_scope_as_a_session_read_does(owner):
    api = owner.client()
    for user, sid, state in (
        ("alice", "a1", {"app:theme": "dark", "user:lang": "fr", "step": 1, "temp:t": 1}),
        ("alice", "a2", {"step": 2}),
        ("bob", "b1", {"user:lang": "de", "temp:t": 2}),
        ("carol", "c1", {}),
    ):
        created = api.post(sessions_url("acme", user), {"session_id": sid, "state": state})
        assert created.status_code == 201, created.content
    appended = api.post(
        f"{sessions_url('acme', 'alice')}/a2/events",
        {"event": text("agent", "ok", actions={"state_delta": {"temp:x": 1, "app:theme": "red"}})},
        format="json",
    )
    assert appended.status_code == 201, appended.content
    assert appended.json()["state"]["temp:x"] == 1
    rows = walk(api, LIST, {"include": "state", "limit": 3})
    states = {(row["user_id"], row["session_id"]): row["state"] for row in rows}
    assert states == {
        ("alice", "a1"): {"app:theme": "red", "user:lang": "fr", "step": 1},
        ("alice", "a2"): {"app:theme": "red", "user:lang": "fr", "step": 2},
        ("bob", "b1"): {"app:theme": "red", "user:lang": "de"},
        ("carol", "c1"): {"app:theme": "red"},
    }
    for (user, sid), state in states.items():
        assert api.get(f"{sessions_url('acme', user)}/{sid}").json()["state"] == state
    per_user = walk(api, sessions_url("acme", "alice"), {"include": "state"})
    assert {row["session_id"]: row["state"] for row in per_user} == {
        "a1": states[("alice", "a1")],
        "a2": states[("alice", "a2")],
    }
    assert all("state" not in row for row in walk(api, LIST, {}))


def test_include_state_costs_one_query_for_the_whole_page(owner):
    api = owner.client()
    for number in range(12):
        user = f"user{number}"
        body = {"session_id": f"s{number}", "state": {f"user:n{number}": number, "k": number}}
        assert api.post(sessions_url("acme", user), body, format="json").status_code == 201

    def queries(params: dict) -> int:
        with CaptureQueriesContext(connection) as captured:
            answer = api.get(LIST, params)
        assert answer.status_code == 200, answer.content
        return len(captured.captured_queries)

    plain = queries({"limit": 2})
    assert queries({"limit": 2, "include": "state"}) == plain + 1
    assert queries({"limit": 12, "include": "state"}) == plain + 1


def test_other_apps_sessions_are_never_listed(acme, outsider):
    other = outsider.client()
    body = {"session_id": "a1", "state": {"app:secret": 1, "user:secret": 2}}
    assert other.post(sessions_url("globex"), body, format="json").status_code == 201
    rows = walk(acme, LIST, {"user_id": "alice", "include": "state"})
    assert pairs(rows) == expected("asc", "alice")
    assert all(row["state"] == {} for row in rows)
    # Another app's list with this app's key is a 404, as if it did not exist.
    answer = acme.get("/api/v1/apps/globex/sessions")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_unknown_and_bad_parameters_are_refused(acme):
    for params, code in (
        ({"user": "alice"}, "unknown_parameter"),
        ({"num_recent_events": "1"}, "unknown_parameter"),
        ({"order": "newest"}, "invalid_parameter"),
        ({"include": "events"}, "invalid_parameter"),
        ({"limit": "0"}, "invalid_parameter"),
    ):
        for url in (LIST, sessions_url("acme")):
            if url != LIST and "user" in params:
                continue
            answer = acme.get(url, params)
            assert answer.status_code == 400, (url, params, answer.content)
            assert answer.json()["error"]["code"] == code
    assert acme.get(sessions_url("acme"), {"user_id": "bob"}).json()["error"]["code"] == (
        "unknown_parameter"
    )


def test_a_cursor_works_only_in_the_order_that_issued_it(acme):
    following = acme.get(LIST, {"limit": 2, "order": "asc"}).json()["next"]
    cursor = following.split("cursor=")[1].split("&")[0]
    answer = acme.get(LIST, {"limit": 2, "order": "desc", "cursor": cursor})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_cursor"


@pytest.mark.parametrize(
    ("ordering", "user"),
    [
        (("updated_at", "id"), None),
        (("-updated_at", "-id"), None),
        (("updated_at", "id"), "b"),
        (("-updated_at", "-id"), "b"),
    ],
)
def test_the_list_reads_an_index_in_either_order(owner, ordering, user):
    """The plan walks an index in the list's order (forwards or backwards), whatever the page:
    no sort. The app-wide order has one index that gives it; with a user, either does."""
    rows = Session.objects.filter(app=owner.app)
    if user is not None:
        rows = rows.filter(user_id=user)
    rows = rows.filter(updated_at__gte=T0).order_by(*ordering)[:51]
    with connection.cursor() as cursor:
        # An almost empty table: without these the planner may as well scan and sort; with
        # them it must show that an index gives the order.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
    plan = rows.explain()
    indexes = (
        ("session_user_activity", "session_app_activity") if user else ("session_app_activity",)
    )
    assert any(f"using {index} on" in plan for index in indexes), plan
    assert "Sort" not in plan, plan
