"""Hostile bodies on every endpoint that takes one: malformed JSON, invalid UTF-8, duplicate
keys, NaN, numbers past 64 bits, NUL characters, nesting past the limit. Each answers a
clear 4xx in the one error envelope — never a 2xx, never a 5xx — with the app's own key,
holding every scope."""

from __future__ import annotations

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
