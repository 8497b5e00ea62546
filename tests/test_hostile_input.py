"""Hostile bodies on every endpoint that takes one: malformed JSON, invalid UTF-8, duplicate
keys, NaN, numbers past 64 bits, NUL characters, nesting past the limit. Hostile path
segments in every path parameter of every endpoint: traversal (plain, encoded, double
encoded, overlong UTF-8, backslashes), invalid UTF-8, NUL and control characters, and
unicode tricks (fullwidth letters, homoglyphs, bidirectional overrides, zero-width and
combining characters). Each answers a clear 4xx in the one error envelope — never a 2xx,
never a 5xx — with the app's own key, holding every scope."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.conf import settings

from tests.test_authorization_matrix import MATRIX
from tests.test_tenant_isolation import fill

BODIES = {
    "malformed": b'{"a": ',
    "invalid utf-8": b'{"a": "\xff\xfe"}',
    "duplicate keys": b'{"a": 1, "a": 2}',
    "nan": b'{"a": NaN}',
    "huge number": b'{"a": 1' + b"0" * 400 + b"}",
    "nul character": b'{"a": "x\\u0000y"}',
    "deep nesting": b"[" * (settings.CTXADMIN_MAX_JSON_DEPTH + 8)
    + b"]" * (settings.CTXADMIN_MAX_JSON_DEPTH + 8),
    "not an object": b'"just a string"',
}
CASES = [
    (route, method, name)
    for route, methods in MATRIX.items()
    for method in methods
    if method in ("post", "put", "patch")
    for name in BODIES
]


# As they travel on the wire: percent-encoded where a client would have to encode them.
SEGMENTS = {
    "dot dot": "..",
    "encoded traversal": "..%2F..%2Fkeys",
    "double-encoded traversal": "%252e%252e%252fkeys",
    "overlong utf-8 dots": "%C0%AE%C0%AE",
    "backslash traversal": quote("..\\..\\keys"),
    "invalid utf-8": "%FF%FE",
    "nul": "a%00b",
    "newline": "alice%0A",
    "path parameter": "alice;x=1",
    "fullwidth letters": quote("\uff41\uff4c\uff49\uff43\uff45"),
    "cyrillic homoglyph": quote("\u0430lice"),
    "right-to-left override": quote("ali\u202ece"),
    "zero-width joiner": quote("ali\u200dce"),
    "combining accent": quote("alice\u0301"),
    "too long": "a" * 300,
}
ROUTE_PARAMETERS = [
    (route, name)
    for route in MATRIX
    if route.startswith("api/")
    for name in re.findall(r"<str:(\w+)>", route)
]


@pytest.fixture
def staff_client(client, django_user_model):
    """A staff session with every permission (no password: nothing to hash)."""
    user = django_user_model(username="staff", is_staff=True, is_superuser=True)
    user.set_unusable_password()
    user.save()
    client.force_login(user)
    return client


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "method", "name"), CASES)
def test_a_hostile_body_gets_a_clear_4xx(route, method, name, owner, staff_client):
    path = fill(route, "acme")
    client = owner.client() if route.startswith("api/") else staff_client
    answer = getattr(client, method)(path, BODIES[name], content_type="application/json")
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.content[:300])
    error = answer.json()["error"]
    assert error["code"] and error["message"] and isinstance(error["details"], dict)


def test_every_endpoint_with_a_body_is_covered():
    with_body = {
        (route, method)
        for route, methods in MATRIX.items()
        for method in methods
        if method in ("post", "put", "patch")
    }
    assert {(route, method) for route, method, _ in CASES} == with_body
    assert len(with_body) >= 24


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "parameter"), ROUTE_PARAMETERS)
def test_a_hostile_path_segment_gets_a_clear_4xx(route, parameter, owner):
    """Each method of the endpoint, with each hostile segment in this one parameter: a 400
    naming it, or no such route or object (404) — never a 2xx, never a 5xx. In the app
    segment it is another app's name: 404, whatever it is."""
    client = owner.client()
    for name, segment in SEGMENTS.items():
        path = fill(route, "acme").split("/")
        template = ("/" + route).split("/")
        path[template.index(f"<str:{parameter}>")] = segment
        url = "/".join(path)
        for method in MATRIX[route]:
            answer = getattr(client, method)(url, {}, format="json")
            where = (name, method, url, answer.status_code, answer.content[:200])
            assert answer.status_code in (400, 404), where
            error = answer.json()["error"]
            if answer.status_code == 400:
                assert error["code"] == "invalid_path_parameter", where
                assert error["details"] == {"parameter": parameter}, where
            else:
                assert error["code"] == "not_found", where
            if parameter == "app":
                assert answer.status_code == 404, where


def test_every_path_parameter_is_covered():
    assert {name for _route, name in ROUTE_PARAMETERS} >= {
        "app",
        "user",
        "sid",
        "prefix",
        "compaction_id",
        "memory_id",
        "job_id",
        "fingerprint",
        "invocation",
        "name",
    }
