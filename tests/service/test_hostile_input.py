"""Hostile bodies on every endpoint that takes one: malformed JSON, invalid UTF-8, duplicate
keys, NaN, numbers past 64 bits, NUL characters, nesting past the limit. Hostile path
segments in every path parameter of every endpoint: traversal (plain, encoded, double
encoded, overlong UTF-8, backslashes), invalid UTF-8, NUL and control characters, and
unicode tricks (fullwidth letters, homoglyphs, bidirectional overrides, zero-width and
combining characters). Each answers a clear 4xx in the one error envelope — never a 2xx,
never a 5xx — with the app's own key, holding every scope."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from django.conf import settings

from tests.service.test_authorization_matrix import MATRIX
from tests.service.test_tenant_isolation import SAMPLE, fill

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
    "lone surrogate": "%ED%A0%80",
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
    segment too: a name no app can have is a 400 before the key's app is compared."""
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


# ----------------------------------------------------------------------------- echoes

# Fake credentials in real shapes, built here so no file holds one whole.
STRIPE_SECRET = "4eC39HqLyjWDarjtT1zdp7dcQ"[:24]
CREDENTIAL = "sk_" + "live_" + STRIPE_SECRET
LONG = "k" * 300
BASE = "/api/v1/apps/acme/users/alice"


def no_echo(answer, where, bound: int = 64) -> str:
    """The answer's body, checked to quote neither the credential nor more than ``bound``
    characters of the long key (64; a memory filter's path shows 80, as its keys may have
    64)."""
    text = answer.content.decode("utf-8")
    assert STRIPE_SECRET not in text, where
    assert "k" * (bound + 1) not in text, where
    return text


@pytest.mark.django_db
def test_an_unknown_key_is_echoed_bounded_and_never_as_a_credential(owner, staff_client):
    """Every endpoint with a body, given a top-level key that looks like a credential and one
    of 300 characters: the error names it (bounded, ``[redacted]`` for the credential)."""
    refused = 0
    for route, methods in MATRIX.items():
        client = owner.client() if route.startswith("api/") else staff_client
        for method in methods:
            if method not in ("post", "put", "patch"):
                continue
            for key in (CREDENTIAL, LONG):
                answer = getattr(client, method)(fill(route, "acme"), {key: 1}, format="json")
                text = no_echo(answer, (route, method, key[:8]))
                if answer.status_code == 400 and "unknown field" in text:
                    refused += 1
    assert refused >= 30, refused


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", f"{BASE}/sessions/s1/events", {"events": [{"author": "user", "{key}": 1}]}),
        (
            "post",
            f"{BASE}/sessions/s1/events",
            {"events": [{"author": "user", "usage_metadata": {"{key}": 1}}]},
        ),
        (
            "post",
            f"{BASE}/sessions/s1/events",
            {"events": [{"author": "u", "actions": {"artifact_delta": {"{key}": -1}}}]},
        ),
        ("put", f"{BASE}/sessions/s1/compaction-policy", {"{key}": 1}),
        ("put", f"{BASE}/sessions/s1/compaction-policy", {"summarizer": {"{key}": 1}}),
        ("post", f"{BASE}/sessions/s1/context", {"policy": {"{key}": 1}}),
        ("post", f"{BASE}/sessions/s1/context", {"memory": {"{key}": 1}}),
        ("post", f"{BASE}/memories", {"content": "x", "metadata": {"-{key}": 1}}),
        ("post", f"{BASE}/memories", {"content": "x", "provenance": {"{key}": 1}}),
        ("post", f"{BASE}/memories/search", {"query": "x", "filter": {"{key}": {"$no": 1}}}),
        ("post", f"{BASE}/memories/search", {"query": "x", "filter": {"$and": 1, "{key}": 2}}),
        (
            "post",
            f"{BASE}/sessions/s1/invocations/inv-1/tool-tokens",
            {"tool_name": "lookup", "capabilities": ["{key}"]},
        ),
        ("post", "/api/v1/apps/acme/keys", {"scopes": ["{key}"]}),
        ("post", "/api/v1/apps/acme/keys", {"scopes": ["memory"], "{key}": 1}),
        (
            "post",
            "/api/v1/apps/acme/cache/acquire",
            {"scope": {"provider": "fake", "policy": {"{key}": 1}}, "prefix": {}},
        ),
    ],
)
def test_a_nested_key_or_value_is_echoed_bounded_and_never_as_a_credential(
    method, path, body, owner
):
    """Where an error names a key or value the client sent deep in a body."""
    client = owner.client()
    client.post(f"{BASE}/sessions", {"session_id": "s1"}, format="json")
    for key in (CREDENTIAL, LONG):
        filled = json.loads(json.dumps(body).replace("{key}", key))
        answer = getattr(client, method)(path, filled, format="json")
        assert 400 <= answer.status_code < 500, (path, answer.content[:300])
        no_echo(answer, (path, key[:8]), 80 if "filter" in body else 64)


@pytest.mark.django_db
def test_an_unknown_query_parameter_or_duplicate_key_is_echoed_bounded(owner, staff_client):
    client = owner.client()
    for key in (CREDENTIAL, LONG):
        for path, who in (
            (f"{BASE}/sessions", client),
            ("/dev/v1/context/acme/alice/s1", client),
            (f"{BASE}/sessions/s1/events", client),
        ):
            answer = who.get(path, {key: "1"})
            assert answer.status_code in (400, 404), answer.content[:300]
            no_echo(answer, (path, key[:8]))
        answer = client.post(f"{BASE}/memories?{key}=1", {"content": "x"}, format="json")
        assert answer.status_code == 400
        no_echo(answer, ("memories", key[:8]))
        duplicate = f'{{"{key}": 1, "{key}": 2}}'
        answer = client.generic(
            "POST", f"{BASE}/sessions", duplicate, content_type="application/json"
        )
        assert answer.status_code == 400, answer.content[:300]
        no_echo(answer, ("duplicate", key[:8]))
    many = {f"q{n}": "1" for n in range(40)}
    answer = client.get(f"{BASE}/sessions", many)
    assert answer.status_code == 400 and len(answer.json()["error"]["details"]["unknown"]) <= 16
    # A normal key is still named in full, in the message and in details.field.
    answer = client.post(f"{BASE}/sessions", {"session_id": "s9", "colour": 1}, format="json")
    assert answer.json()["error"]["details"] == {"field": "colour"}, answer.content


# ----------------------------------------------------------------------------- surrogates

# A lone surrogate: valid JSON text as an escape, but no UTF-8 can encode it (the database
# cannot store it, the answer that echoes it cannot be written). On the wire of a query
# string or a path it is the three bytes of its would-be UTF-8 form, which are not UTF-8.
SURROGATE = "\ud800"
ENCODED_SURROGATE = "%ED%A0%80"
SCHEMA = yaml.safe_load((Path(__file__).resolve().parents[2] / "docs/openapi.yaml").read_text())
OPERATIONS = [
    (path, method, operation)
    for path, methods in SCHEMA["paths"].items()
    for method, operation in methods.items()
    if method in ("get", "post", "put", "patch", "delete")
]


def schema_url(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "acme" if m[1] == "app" else SAMPLE[m[1]], path)


def resolved(schema: dict) -> dict:
    while "$ref" in schema:
        schema = SCHEMA["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def instance(schema: dict, depth: int = 0):
    """A value of ``schema`` with every property it names filled: every string field of a
    body is then a place to plant a surrogate in."""
    schema = resolved(schema)
    if depth > 8:
        return None
    if "oneOf" in schema or "anyOf" in schema:
        return instance((schema.get("oneOf") or schema["anyOf"])[0], depth + 1)
    if "allOf" in schema:
        merged: dict = {}
        for part in schema["allOf"]:
            value = instance(part, depth + 1)
            merged.update(value if isinstance(value, dict) else {})
        return merged
    choices = [choice for choice in schema.get("enum", ()) if choice is not None]
    if choices:
        return choices[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next(one for one in kind if one != "null")
    if kind == "object" or "properties" in schema:
        value = {
            name: instance(child, depth + 1)
            for name, child in schema.get("properties", {}).items()
            if not child.get("readOnly")
        }
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and not value:
            value["k"] = instance(extra, depth + 1)
        return value
    if kind == "array":
        return [instance(schema.get("items", {}), depth + 1)]
    if kind == "integer" or kind == "number":
        return max(1, schema.get("minimum", 1))
    if kind == "boolean":
        return False
    return "x"


def planted(value, path: str = ""):
    """``(field, body)`` for each place of ``value`` a surrogate can be: in every string,
    alone and after text, and as a new key of every object; ``field`` names it as the error
    must (``a.b[0]``; the whole body is ``body``)."""
    if isinstance(value, str):
        yield path or "body", SURROGATE
        yield path or "body", value + SURROGATE
    elif isinstance(value, dict):
        for key, child in value.items():
            for field, body in planted(child, f"{path}.{key}" if path else key):
                yield field, {**value, key: body}
        key = "\\ud800"  # how an error names the key
        yield (f"{path}.{key}" if path else key), {**value, SURROGATE: "x"}
    elif isinstance(value, list):
        for index, child in enumerate(value):
            for field, body in planted(child, f"{path}[{index}]"):
                yield field, [*value[:index], body, *value[index + 1 :]]


def json_body(operation: dict):
    content = operation.get("requestBody", {}).get("content", {})
    return (
        instance(content["application/json"]["schema"]) if "application/json" in content else None
    )


BODY_OPERATIONS = [
    (path, method) for path, method, operation in OPERATIONS if json_body(operation) is not None
]
QUERY_OPERATIONS = [
    (path, method)
    for path, method, operation in OPERATIONS
    if any(parameter["in"] == "query" for parameter in operation.get("parameters", ()))
]


def operation(path: str, method: str) -> dict:
    return SCHEMA["paths"][path][method]


def encoded(value) -> bytes:
    # json.dumps escapes the surrogate as \ud800: the JSON text itself is valid UTF-8.
    return json.dumps(value).encode("utf-8")


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "method"), BODY_OPERATIONS)
def test_a_lone_surrogate_anywhere_in_a_body_is_refused_naming_where(path, method, owner):
    """Every string field, every key, at any depth, of every operation with a JSON body:
    400 ``invalid_characters`` with ``details.field`` where the parser found it. (The session
    exists: a view may answer 404 for a missing one before it reads the body.)"""
    client = owner.client()
    client.post(f"{BASE}/sessions", {"session_id": SAMPLE["sid"]}, format="json")
    places = list(planted(json_body(operation(path, method))))
    assert places
    for field, body in places:
        answer = client.generic(
            method.upper(), schema_url(path), encoded(body), content_type="application/json"
        )
        where = (method, path, field, answer.status_code, answer.content[:300])
        assert answer.status_code == 400, where
        error = answer.json()["error"]
        assert error["code"] == "invalid_characters", where
        assert error["details"] == {"field": field}, where
        assert "surrogate" in error["message"], where


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "method"), QUERY_OPERATIONS)
def test_a_lone_surrogate_in_a_query_parameter_is_refused(path, method, owner):
    """Percent-encoded, it is not UTF-8: 400 ``invalid_parameter`` naming the parameter (not
    read as U+FFFD). As a JSON escape in a parameter's text (a filter), a 4xx, never a 5xx."""
    client = owner.client()
    body = json_body(operation(path, method))
    data = encoded(body) if body is not None else b""
    names = [p["name"] for p in operation(path, method)["parameters"] if p["in"] == "query"]
    for name in names:
        url = f"{schema_url(path)}?{name}=a{ENCODED_SURROGATE}"
        answer = client.generic(method.upper(), url, data, content_type="application/json")
        where = (method, url, answer.status_code, answer.content[:300])
        assert answer.status_code == 400, where
        error = answer.json()["error"]
        assert (error["code"], error["details"]) == ("invalid_parameter", {"parameter": name})
        for text in ('{"a": "\\ud800"}', '{"\\ud800": 1}', '"\\udfff"'):
            url = f"{schema_url(path)}?{name}={quote(text)}"
            answer = client.generic(method.upper(), url, data, content_type="application/json")
            where = (method, url, answer.status_code, answer.content[:300])
            assert answer.status_code < 500, where
            if answer.status_code >= 400:
                assert answer.json()["error"]["code"], where


def test_every_operation_is_covered():
    """Generated from the schema: a new operation is covered without being listed here."""
    assert len(BODY_OPERATIONS) >= 25
    assert ("/api/v1/apps/{app}/threads/{thread}/checkpoints", "get") in QUERY_OPERATIONS
    assert ("/api/v1/apps/{app}/users/{user}/memories", "get") in QUERY_OPERATIONS


# ----------------------------------------------------------------------------- repeats


def query_parameters(path: str, method: str) -> list[dict]:
    return [p for p in operation(path, method).get("parameters", ()) if p["in"] == "query"]


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "method"), QUERY_OPERATIONS)
def test_a_repeated_query_parameter_is_refused(path, method, owner):
    """Each query parameter of each operation, given twice (the same value or two): 400
    ``invalid_parameter`` naming it — never read by its last value. Only a parameter the
    schema documents as an array may repeat."""
    client = owner.client()
    client.post(f"{BASE}/sessions", {"session_id": SAMPLE["sid"]}, format="json")
    body = json_body(operation(path, method))
    data = encoded(body) if body is not None else b""
    for parameter in query_parameters(path, method):
        name = parameter["name"]
        for values in (("1", "1"), ("1", "2")):
            url = f"{schema_url(path)}?{name}={values[0]}&{name}={values[1]}"
            answer = client.generic(method.upper(), url, data, content_type="application/json")
            where = (method, url, answer.status_code, answer.content[:300])
            if parameter.get("schema", {}).get("type") == "array":
                assert answer.status_code < 500, where
                continue
            assert answer.status_code == 400, where
            error = answer.json()["error"]
            assert error["code"] == "invalid_parameter", where
            assert error["details"] == {"parameter": name}, where
            assert error["message"] == f"{name} must be given once", where


@pytest.mark.django_db
def test_a_repeated_parameter_is_refused_on_the_console_side_too(owner, staff_client):
    """The diagnostics door, with a key and as a logged-in operator."""
    url = "/dev/v1/context/acme/alice/s1?max_bytes=100&max_bytes=200"
    for client in (owner.client(), staff_client):
        answer = client.get(url)
        assert answer.status_code == 400, answer.content[:300]
        error = answer.json()["error"]
        assert (error["code"], error["details"]) == (
            "invalid_parameter",
            {"parameter": "max_bytes"},
        )
