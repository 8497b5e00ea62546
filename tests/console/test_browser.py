"""The operator console in a real browser (headless Chromium through Selenium and Debian's
chromedriver): log in through the form, open the dashboard, see its charts drawn and
refreshed in place, open a session, a checkpoint and an ingestion job, and find the seeded
conversation on none of those pages. Screenshots go to the test's folder (and, with
``CTXADMIN_SAVE_SCREENSHOTS=1``, the dashboard's to ``docs/dashboard.png``)."""

from __future__ import annotations

import base64
import os
import shutil
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from ctxadmin import stack
from ctxadmin.models import AuditLog
from memory.models import OutboxJob
from sessions_app.models import Checkpoint, Event, Session
from tests.conftest import make_tenant
from tests.dashboard_helpers import (
    DISTINCTIVE,
    SESSION,
    USER,
    content_texts,
    dashboard_forbidden_texts,
    invoke,
    seed_activity,
    seed_history,
)
from tests.sessions_helpers import sessions_url, text

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PASSWORD = "operator-pw-8d1f3c"
# Each must show data after seeding; "errors" too (the history holds failures).
CHARTS = (
    "events",
    "compaction_savings",
    "outbox_backlog",
    "outbox_ended",
    "cache",
    "memory",
    "searches",
    "searches_per_app",
    "errors",
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def browser():
    """Fails (never skips) without Chromium: a skipped test would hide a broken console."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        pytest.fail(
            f"the browser test needs Debian's chromium and chromium-driver ({', '.join(missing)} "
            "missing): `make test` installs them when run as root with apt-get; otherwise run "
            "`apt-get install -y --no-install-recommends chromium chromium-driver`",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1440,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(autouse=True)
def quiet(monkeypatch, settings):
    """No messages to a broker another test's worker reads: the job stays in the backlog."""
    from caching.adapters import fake_adapter
    from caching.tasks import cleanup
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (cleanup, drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)
    settings.CTXADMIN_FAKE_MODEL_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_DELAY_MS = 0
    settings.CTXADMIN_CACHE_FAKE_FAILURE = ""
    fake_adapter().reset()


def wait_until(predicate, timeout: float = 20, what: str = "the page"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def assert_shows_none_of(driver, texts: list[str], page: str) -> None:
    shown = driver.page_source
    visible = driver.execute_script("return document.body.innerText")
    for word in texts:
        assert word not in shown and word not in visible, f"{word!r} is on {page}"
    assert "Server Error" not in shown and "Traceback" not in shown, page


def screenshot(driver, folder: Path, name: str, *, full_page: bool = False) -> Path:
    path = folder / f"{name}.png"
    if full_page:
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"]}
                | {"scale": 1},
            },
        )
        path.write_bytes(base64.b64decode(shot["data"]))
    else:
        assert driver.save_screenshot(str(path)), path
    return path


def chart_total(driver, name: str) -> int:
    # One script call: a refresh may swap the chart between a lookup and a read.
    return int(
        driver.execute_script(
            "return document.querySelector(`svg[data-chart='${arguments[0]}']`)"
            ".getAttribute('data-total');",
            name,
        )
    )


def operator_without_content_permission():
    """Staff allowed to view every page, except conversation content (``view_content``:
    the detail pages show content to holders of it, audit-logged)."""
    operator = get_user_model().objects.create_user("operator", password=PASSWORD, is_staff=True)
    views = Permission.objects.filter(codename__startswith="view_").exclude(codename="view_content")
    operator.user_permissions.add(*views)
    return operator


def test_the_console_in_a_browser(browser, live_server, tmp_path):
    owner = make_tenant("acme")
    operator_without_content_permission()
    client = owner.client()
    seeded = seed_activity(client)
    invoke(client, "inv-1", f"check the {DISTINCTIVE} booking")
    invoke(client, "inv-2", f"and the {DISTINCTIVE} return")
    seed_history(client, owner.app)
    for name, count in (("globex", 6), ("initech", 3)):
        tenant = make_tenant(name)
        for n in range(count):
            added = tenant.client().post(
                f"/api/v1/apps/{name}/users/u{n % 2}/memories",
                {"content": f"{DISTINCTIVE} fact {n}"},
                format="json",
            )
            assert added.status_code == 201, added.content
    session = Session.objects.get(session_id=SESSION)
    checkpoint = Checkpoint.objects.get(compaction_id=seeded["compaction"]["compaction_id"])
    job = OutboxJob.objects.get(pk=seeded["job"]["job_id"])
    assert Event.objects.filter(context_json__contains=DISTINCTIVE).exists()

    # Log in through the form, from the login page.
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element("id", "id_username").send_keys("operator")
    browser.find_element("id", "id_password").send_keys(PASSWORD)
    browser.find_element("css selector", 'input[type="submit"]').click()
    link = wait_until(
        lambda: browser.find_elements("id", "dashboard-link"), what="the index's dashboard link"
    )[0]
    link.click()

    # The dashboard: every chart drawn, with data.
    wait_until(lambda: "/admin/dashboard/" in browser.current_url, what="the dashboard")
    charts = browser.find_elements("css selector", "svg.chart")
    assert sorted(chart.get_attribute("data-chart") for chart in charts) == sorted(CHARTS)
    for name in CHARTS:
        drawn = browser.find_elements("css selector", f'svg[data-chart="{name}"] rect[data-value]')
        assert drawn, f"the {name} chart drew nothing"
        assert chart_total(browser, name) > 0, name
        box = browser.find_element("css selector", f'svg[data-chart="{name}"]').rect
        # A bar list is one row per entry (one app here); column charts are taller.
        assert box["width"] > 300 and box["height"] > 20, (name, box)
    assert_shows_none_of(browser, dashboard_forbidden_texts(), "the dashboard")
    hit_ratio = browser.find_element("css selector", '[data-figure="cache_hit_ratio"]').text
    assert hit_ratio.endswith("%") and hit_ratio != "n/a"
    shot = screenshot(browser, tmp_path, "dashboard", full_page=True)
    if os.environ.get("CTXADMIN_SAVE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, stack.PROJECT_DIR / "docs" / "dashboard.png")

    # Refreshed in place: new events show up with no navigation.
    browser.get(f"{live_server.url}/admin/dashboard/?refresh=2")
    before = chart_total(browser, "events")
    browser.execute_script("window.opsMarker = 'same page';")
    appended = client.post(
        f"{sessions_url('acme', USER)}/{SESSION}/events",
        {"events": [text("user", "one more"), text("agent", "and another")]},
        format="json",
    )
    assert appended.status_code == 201, appended.content
    wait_until(lambda: chart_total(browser, "events") == before + 2, what="the refreshed chart")
    assert browser.execute_script("return window.opsMarker") == "same page"
    assert browser.find_element("id", "ops-problem").get_attribute("hidden") is not None

    # A session, a checkpoint and an ingestion job: their numbers, not their content.
    pages = {
        "session": (f"/admin/sessions_app/session/{session.pk}/change/", SESSION),
        "checkpoint": (f"/admin/sessions_app/checkpoint/{checkpoint.pk}/change/", checkpoint.pk),
        "outbox-job": (f"/admin/memory/outboxjob/{job.pk}/change/", job.pk),
    }
    for name, (path, shown_id) in pages.items():
        browser.get(f"{live_server.url}{path}")
        wait_until(lambda: browser.find_elements("id", "content"), what=name)
        assert browser.find_elements("css selector", "div.form-row"), f"the {name} page is empty"
        assert str(shown_id) in browser.page_source, f"the {name} page is not {shown_id}"
        assert_shows_none_of(browser, content_texts(), f"the {name} page")
        screenshot(browser, tmp_path, name)
    # From the session's page to its events and its checkpoints, by its links.
    for label, shown in (("events", Event), ("checkpoints", Checkpoint)):
        browser.get(f"{live_server.url}/admin/sessions_app/session/{session.pk}/change/")
        browser.find_element("css selector", f'a[data-session-rows="{label}"]').click()
        wait_until(lambda: "session__id__exact" in browser.current_url, what=f"its {label}")
        rows = browser.find_elements("css selector", "#result_list tbody tr")
        assert len(rows) == shown.objects.filter(session=session).count(), label
        assert_shows_none_of(browser, content_texts(), f"the session's {label}")

    # A content viewer sees an event's content under a banner saying it was audit-logged.
    viewer = get_user_model().objects.get(username="operator")
    viewer.user_permissions.add(Permission.objects.get(codename="view_content"))
    event = Event.objects.filter(session=session, content__isnull=False).order_by("seq").first()
    browser.get(f"{live_server.url}/admin/sessions_app/event/{event.pk}/change/")
    banner = wait_until(
        lambda: browser.find_elements("css selector", "ul.messagelist li.warning"),
        what="the content banner",
    )
    assert "written to the audit log" in banner[0].text
    assert AuditLog.objects.filter(object_id=str(event.pk), username="operator").exists()

    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "checkpoint.png",
        "dashboard.png",
        "outbox-job.png",
        "session.png",
    ]
