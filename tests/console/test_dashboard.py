"""The operator dashboard and its JSON: staff only, content-free, and its numbers match what
was seeded (hour by hour, inside the window only); the SVG charts it renders."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from console.dashboard import charts
from memory import selectors as memory_selectors
from memory.models import OutboxJob
from sessions_app.models import Checkpoint, Event, Invocation, Session
from tests.conftest import make_tenant
from tests.dashboard_helpers import (
    DISTINCTIVE,
    SESSION,
    TURNS,
    content_texts,
    dashboard_forbidden_texts,
    seed_activity,
)

PAGE = "/admin/dashboard/"
DATA = "/admin/dashboard/data.json"


def make_user(username: str, **flags):
    return get_user_model().objects.create_user(username, password="pw-0123456789", **flags)


@pytest.fixture
def operator(db, client):
    client.force_login(get_user_model().objects.create_superuser("op", password="op-pw-123456"))
    return client


def hour_start(hours_ago: int):
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('hour', statement_timestamp())")
        return cursor.fetchone()[0] - timedelta(hours=hours_ago)


def invocation(session: Session, status: str, cache_status: str, created_at=None) -> Invocation:
    row = Invocation.objects.create(
        session=session,
        invocation_id=f"inv-{uuid.uuid4().hex[:8]}",
        status=status,
        provider="fake",
        model="fake-1",
        request_fingerprint="0" * 64,
        cache_status=cache_status,
        error_code="provider_timeout" if status == Invocation.FAILED else "",
    )
    if created_at is not None:
        Invocation.objects.filter(pk=row.pk).update(created_at=created_at)
    return row


# ----------------------------------------------------------------------------- who may look


@pytest.mark.django_db
@pytest.mark.parametrize("url", [PAGE, DATA])
def test_anonymous_is_sent_to_the_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(f"/admin/login/?next={url}")


@pytest.mark.django_db
@pytest.mark.parametrize("url", [PAGE, DATA])
def test_a_user_who_is_not_staff_is_refused(client, owner, url):
    seed_activity(owner.client())
    client.force_login(make_user("visitor"))
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert b"data-chart" not in response.content and b"events_per_hour" not in response.content


@pytest.mark.django_db
def test_staff_see_it_and_the_index_links_to_it(client):
    client.force_login(make_user("staff", is_staff=True))
    page = client.get(PAGE)
    assert page.status_code == 200
    assert page.content.count(b'<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == 9
    assert client.get(DATA).status_code == 200
    index = client.get("/admin/")
    assert b'href="/admin/dashboard/"' in index.content


# ----------------------------------------------------------------------------- content-free


@pytest.mark.django_db
def test_nothing_seeded_is_shown(operator, owner):
    seeded = seed_activity(owner.client())
    compacted = Checkpoint.objects.get(compaction_id=seeded["compaction"]["compaction_id"])
    assert compacted.status == "active"
    assert Event.objects.filter(context_json__contains=DISTINCTIVE).exists()
    page = operator.get(PAGE)
    data = operator.get(DATA)
    assert page.status_code == data.status_code == 200
    assert data["Content-Type"] == "application/json"
    assert "no-store" in data["Cache-Control"]
    for response in (page, data):
        for text in dashboard_forbidden_texts():
            assert text.encode() not in response.content, text
    assert "zebra" not in str(data.json()["data"])


@pytest.mark.django_db
def test_the_script_and_styles_are_served_locally(operator):
    page = operator.get(PAGE).content.decode()
    assert 'src="/static/ctxadmin/dashboard.js"' in page
    assert "http://" not in page.split("<body")[0] and "https://" not in page.split("<body")[0]
    script = operator.get("/static/ctxadmin/dashboard.js")
    assert script.status_code == 200
    assert b"data-chart-slot" in b"".join(script.streaming_content)


# ----------------------------------------------------------------------------- the numbers


@pytest.mark.django_db
def test_the_numbers_are_those_of_the_seeded_data(operator, owner, django_assert_max_num_queries):
    seeded = seed_activity(owner.client())
    outsider = make_tenant("globex")
    added = outsider.client().post(
        "/api/v1/apps/globex/users/bob/memories", {"content": "tea"}, format="json"
    )
    assert added.status_code == 201
    session = Session.objects.get(session_id=SESSION)
    # Outside the window: an event and an invocation of three days ago are not counted.
    old = Event.objects.filter(session=session).order_by("seq").first()
    Event.objects.filter(pk=old.pk).update(created_at=hour_start(72))
    invocation(session, "completed", "hit", created_at=hour_start(72))
    # Five hours ago: counted in that hour's column.
    moved = Event.objects.filter(session=session).order_by("seq")[1]
    moved_to = hour_start(5)
    Event.objects.filter(pk=moved.pk).update(created_at=moved_to + timedelta(minutes=1))
    for status, cache_status in [
        ("completed", "hit"),
        ("completed", "hit"),
        ("completed", "created"),
        ("completed", "bypass"),
        ("completed", "off"),
        ("failed", ""),
    ]:
        invocation(session, status, cache_status)
    Checkpoint.objects.create(
        id=uuid.uuid4(), session=session, status="failed", origin="manual", reason="timeout"
    )
    failed_job = OutboxJob.objects.get(pk=seeded["job"]["job_id"])
    OutboxJob.objects.filter(pk=failed_job.pk).update(
        phase="failed", finished_at=hour_start(0), payload=[], error_code="attempts_exhausted"
    )
    waiting = owner.client().post(
        "/api/v1/apps/acme/users/carol/sessions", {"session_id": "s2"}, format="json"
    )
    assert waiting.status_code == 201
    owner.client().post(
        "/api/v1/apps/acme/users/carol/sessions/s2/events",
        {"event": {"author": "user", "content": {"role": "user", "parts": [{"text": "hi"}]}}},
        format="json",
    )
    job = owner.client().post(
        "/api/v1/apps/acme/users/carol/memories/ingestions", {"session_id": "s2"}, format="json"
    )
    assert job.status_code == 202

    # Seventeen reads (the MCP call count is one, the keyed entries and closed versions one,
    # the extraction runs one, the jobs waiting for a token budget one), whatever the data
    # (and the login's session and user).
    with django_assert_max_num_queries(19):
        response = operator.get(DATA)
    payload = response.json()
    data, figures = payload["data"], payload["figures"]

    assert len(data["hours"]) == 48
    events = data["events_per_hour"]
    # 2 * TURNS appended, the compaction's summary event, the second session's one, less
    # the one moved out of the window.
    assert sum(events) == 2 * TURNS + 1 + 1 - 1 == Event.objects.count() - 1
    assert events[data["hours"].index(moved_to.isoformat())] == 1

    compaction = seeded["compaction"]
    compactions = data["compactions"]
    assert sum(compactions["requested"]) == 2
    assert sum(compactions["committed"]) == 1 and sum(compactions["failed"]) == 1
    saved = compaction["tokens_before"] - compaction["tokens_after"]
    assert saved > 0 and sum(compactions["saved_per_hour"]) == saved
    assert figures["tokens_saved"] == charts.number(saved)

    cache = data["invocations"]["cache_per_hour"]
    assert {outcome: sum(values) for outcome, values in cache.items()} == {
        "hit": 2,
        "created": 1,
        "bypass": 1,
        "off": 1,
        "none": 1,
    }
    assert figures["cache_hit_ratio"] == "50.0%" and figures["cache_bypass_ratio"] == "25.0%"
    assert figures["invocations_failed"] == "1 of 6"
    assert figures["invocations_failed_rate"] == "16.7%"
    assert figures["compactions_failed"] == "1 of 2"

    outbox = data["outbox"]
    assert outbox["active_by_phase"] == {"pending": 1, "running": 0, "retry": 0}
    assert sum(outbox["ended_per_hour"]["failed"]) == 1
    assert sum(outbox["ended_per_hour"]["completed"]) == 0
    assert outbox["rows"] == 2
    assert outbox["oldest_due_age_seconds"] is not None and outbox["oldest_due_age_seconds"] >= 0
    assert outbox["expired_leases"] == 0
    assert figures["outbox_failed"] == "1 of 1"

    assert data["memory"]["apps"] == [
        {"app": "acme", "entries": 1, "scopes": 1},
        {"app": "globex", "entries": 1, "scopes": 1},
    ]
    assert data["memory"]["entries"] == 2 and data["memory"]["apps_with_entries"] == 2
    assert figures["memory_entries"] == "2" and figures["memory_apps"] == "2"
    # The two searches seed_activity made, this hour, in acme.
    assert data["searches"]["total"] == 2 and data["searches"]["per_hour"][-1] == 2
    assert data["searches"]["apps"] == [{"app": "acme", "searches": 2}]
    assert figures["memory_searches"] == "2"
    # The chart names the largest apps only; the totals count every app.
    assert memory_selectors.memory_per_app(limit=1) == {
        "entries": 2,
        "keyed": 0,
        "closed_versions": 0,
        "apps_with_entries": 2,
        "apps": [{"app": "acme", "entries": 1, "scopes": 1}],
    }

    # The charts draw the same numbers.
    svg = payload["charts"]
    assert re.search(r'data-chart="events"[^>]*data-total="(\d+)"', svg["events"]).group(1) == str(
        sum(events)
    )
    assert f'data-total="{saved}"' in svg["compaction_savings"]
    assert 'data-series="hit"' in svg["cache"] and 'data-series="pending"' in svg["outbox_backlog"]
    assert 'data-series="acme" data-value="1"' in svg["memory"]
    assert svg["errors"].count('data-series="invocations"') == 1


@pytest.mark.django_db
def test_an_overdue_job_and_an_expired_lease(operator, owner):
    seeded = seed_activity(owner.client())
    OutboxJob.objects.filter(pk=seeded["job"]["job_id"]).update(
        due_at=hour_start(0) - timedelta(minutes=90)
    )
    data = operator.get(DATA).json()
    assert data["data"]["outbox"]["oldest_due_age_seconds"] >= 90 * 60
    assert data["figures"]["outbox_oldest_due"].startswith(("1 h 3", "1 h 4", "1 h 5", "2 h"))
    OutboxJob.objects.filter(pk=seeded["job"]["job_id"]).update(phase="running")
    outbox = operator.get(DATA).json()["data"]["outbox"]
    assert outbox["oldest_due_age_seconds"] is None and outbox["expired_leases"] == 1


@pytest.mark.django_db
def test_the_page_renders_the_same_figures_and_a_chosen_refresh(operator, owner):
    seed_activity(owner.client())
    page = operator.get(f"{PAGE}?refresh=5").content.decode()
    assert 'data-refresh-seconds="5"' in page
    assert 'data-source="/admin/dashboard/data.json"' in page
    assert re.search(r'data-figure="memory_entries">1<', page)
    assert 'data-chart-slot="events"' in page and 'data-chart="events"' in page
    for junk in ("0", "1", "99999", "²", "-5", "x"):
        shown = operator.get(PAGE, {"refresh": junk}).content.decode()
        assert 'data-refresh-seconds="15"' in shown, junk
    for text in content_texts():
        assert text not in page


# ----------------------------------------------------------------------------- the charts


def test_nice_ceiling_and_numbers():
    assert [charts.nice_ceiling(v) for v in (0, 1, 3, 7, 11, 240, 2600)] == [
        1,
        1,
        5,
        10,
        20,
        250,
        5000,
    ]
    assert [charts.number(v) for v in (0, 950, 12500, 3_100_000, 2.5)] == [
        "0",
        "950",
        "12.5k",
        "3.1M",
        "2.5",
    ]


def test_a_column_chart_draws_one_rect_per_value_and_escapes_labels():
    svg = charts.column_chart(
        "t",
        "a <b> chart",
        ["00:00", "01:00", "<x>"],
        [charts.Series("one", "blue", [1, 0, 3]), charts.Series("t&o", "red", [2, 0, 0])],
        unit="things",
    )
    assert svg.startswith("<svg ") and 'data-chart="t"' in svg and 'data-total="6"' in svg
    assert svg.count("<rect ") == 3 + 2  # three values and the two legend keys
    assert "<x>" not in svg and "&lt;x&gt;" in svg and "t&amp;o" in svg
    assert "nothing in this window" not in svg
    empty = charts.column_chart(
        "e", "e", ["a", "b"], [charts.Series("s", "blue", [0, 0])], unit="u"
    )
    assert "nothing in this window" in empty and 'data-total="0"' in empty
    with pytest.raises(ValueError, match="one value per slot"):
        charts.column_chart("bad", "bad", ["a"], [charts.Series("s", "blue", [1, 2])], unit="u")


def test_a_bar_list_draws_zero_rows_without_a_bar():
    svg = charts.bar_list("b", "b", [("pending", 3), ("running", 0)], unit="jobs")
    assert svg.count("<rect ") == 1 and 'data-value="3"' in svg and ">running<" in svg
    assert "nothing in this window" in charts.bar_list("n", "n", [], unit="x")


def _visible_text(svg: str) -> list[str]:
    """The texts drawn on the chart (tooltips, read only when hovering, left out)."""
    return re.findall(r"<text[^>]*>([^<]*)</text>", re.sub(r"<title>.*?</title>", "", svg))


def test_the_memory_bars_say_what_they_count_without_hovering(operator, owner):
    owner.client().post(
        "/api/v1/apps/acme/users/u/memories", {"content": "Alice likes tea"}, format="json"
    )
    svg = operator.get("/admin/dashboard/data.json").json()["charts"]
    texts = _visible_text(svg["memory"])
    assert texts[:2] == ["app", "entries"]  # the header: rows are apps, bars count entries
    assert "acme" in texts and "1 entries" in texts
    assert _visible_text(svg["searches_per_app"])[:2] == ["app", "searches"]
    assert "searches per hour" in _visible_text(svg["searches"])
    assert _visible_text(svg["outbox_backlog"])[:2] == ["phase", "jobs"]
