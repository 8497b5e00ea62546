"""List cursors are signed and bound to the list that issued them: a tampered, forged or
foreign cursor is a 400 ``invalid_cursor`` on every paginated list, never a 500 and never a
page of another list."""

from __future__ import annotations

import base64
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import make_tenant
from tests.service.test_tenant_isolation import SAMPLE

pytestmark = pytest.mark.django_db

USER = "/api/v1/apps/acme/users/alice"
SESSION = f"{USER}/sessions/{SAMPLE['sid']}"


def paginated_routes() -> list[str]:
    """Every API route whose GET is a cursor-paginated list."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "view_class", None)
                if (
                    view is not None
                    and hasattr(view, "get")
                    and getattr(view, "pagination_class", None) is not None
                    and "<str:app>" in prefix + str(pattern.pattern)
                ):
                    yield prefix + str(pattern.pattern)

    return sorted(set(walk(get_resolver().url_patterns)))


ROUTES = paginated_routes()


def fill(route: str) -> str:
    return "/" + re.sub(
        r"<str:(\w+)>", lambda m: "acme" if m.group(1) == "app" else SAMPLE[m.group(1)], route
    )


@pytest.fixture
def acme():
    tenant = make_tenant("acme")
    api = tenant.client()
    from ctxadmin.services import create_api_key

    create_api_key(tenant.app, ["sessions"], name="second")
    for sid in (SAMPLE["sid"], "s-2"):
        made = api.post(f"{USER}/sessions", {"session_id": sid}, format="json")
        assert made.status_code == 201, made.content
    for number in range(3):
        api.post(
            f"{SESSION}/events",
            {
                "event": {
                    "author": "user",
                    "content": {"role": "user", "parts": [{"text": f"hello {number}"}]},
                }
            },
            format="json",
        )
    for name, data in ((SAMPLE["name"], "one"), (SAMPLE["name"], "two"), ("b.txt", "three")):
        saved = api.post(
            f"{SESSION}/artifacts/{name}",
            {"data_base64": base64.b64encode(data.encode()).decode(), "mime_type": "text/plain"},
            format="json",
        )
        assert saved.status_code == 201, saved.content
    return tenant


def test_the_walk_finds_every_paginated_list():
    lists = {route.split("/")[-1] or route.split("/")[-2] for route in ROUTES}
    assert {"sessions", "events", "compactions", "artifacts", "versions", "keys"} <= lists


def _next_cursor(client, url: str) -> str | None:
    page = client.get(url, {"limit": 1})
    assert page.status_code == 200, (url, page.content)
    link = page.json()["next"]
    return None if link is None else parse_qs(urlsplit(link).query)["cursor"][0]


@pytest.mark.parametrize("route", ROUTES)
def test_a_tampered_or_forged_cursor_is_a_400(route, acme):
    url = fill(route)
    client = acme.client()
    unsigned = {
        "a position that is not a date": base64.b64encode(b"p=notadate").decode(),
        "a position that is not a number": base64.b64encode(b"p=1e999").decode(),
        "a huge offset": base64.b64encode(b"o=99999999&p=1").decode(),
        "not base64": "%%%",
        "empty": "",
    }
    for name, cursor in unsigned.items():
        answer = client.get(url, {"cursor": cursor})
        assert answer.status_code == 400, (name, answer.status_code, answer.content[:300])
        error = answer.json()["error"]
        assert error["code"] == "invalid_cursor" and error["details"] == {"parameter": "cursor"}
    issued = _next_cursor(client, url)
    if issued is not None:
        assert client.get(url, {"cursor": issued}).status_code == 200
        flipped = issued[:-1] + ("A" if issued[-1] != "A" else "B")
        answer = client.get(url, {"cursor": flipped})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_cursor"


def test_a_cursor_only_works_on_the_list_that_issued_it(acme):
    client = acme.client()
    events_cursor = _next_cursor(client, f"{SESSION}/events")
    assert events_cursor is not None
    other_session = client.get(f"{USER}/sessions/s-2/events", {"cursor": events_cursor})
    assert other_session.status_code == 400
    sessions_cursor = _next_cursor(client, f"{USER}/sessions")
    assert sessions_cursor is not None
    for url in ("/api/v1/apps/acme/users/bob/sessions", f"{SESSION}/events"):
        answer = client.get(url, {"cursor": sessions_cursor})
        assert answer.status_code == 400, url
        assert answer.json()["error"]["code"] == "invalid_cursor"
    outsider = make_tenant("globex")
    outsider.client().post(
        "/api/v1/apps/globex/users/alice/sessions", {"session_id": "s-1"}, format="json"
    )
    foreign = outsider.client().get(
        "/api/v1/apps/globex/users/alice/sessions", {"cursor": sessions_cursor}
    )
    assert foreign.status_code == 400


def test_paging_with_signed_cursors_walks_the_whole_list_both_ways(acme):
    client = acme.client()
    seen, url = [], f"{SESSION}/events?limit=1"
    previous = None
    while url:
        page = client.get(url)
        assert page.status_code == 200, page.content
        seen += [event["seq"] for event in page.json()["results"]]
        previous = page.json()["previous"] or previous
        url = page.json()["next"]
    assert seen == [1, 2, 3]
    back = client.get(previous)
    assert back.status_code == 200 and back.json()["results"][0]["seq"] == 2


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    cursor=st.one_of(
        st.text(max_size=200),
        st.binary(max_size=120).map(lambda raw: base64.b64encode(raw).decode()),
        st.fixed_dictionaries(
            {"p": st.text(max_size=30)},
            optional={"o": st.integers(-5, 10**9).map(str), "r": st.sampled_from(["0", "1", "x"])},
        ).map(lambda tokens: base64.b64encode(urlencode(tokens).encode()).decode()),
    )
)
def test_any_cursor_value_is_a_page_or_a_400_never_a_500(acme, cursor):
    client = acme.client()
    for url in (
        f"{USER}/sessions",
        f"{SESSION}/events",
        f"{SESSION}/compactions",
        f"{SESSION}/artifacts",
        f"{SESSION}/artifacts/{SAMPLE['name']}/versions",
        "/api/v1/apps/acme/keys",
    ):
        answer = client.get(url, {"cursor": cursor})
        assert answer.status_code in (200, 400), (url, cursor, answer.status_code)
        if answer.status_code == 400:
            assert answer.json()["error"]["code"] in ("invalid_cursor", "invalid_parameter")
