"""Raw artifact uploads at their edges: empty and exact-limit bodies, every kind of
Content-Type, repeated parameters, HEAD, stored HTML served back, chunked bodies through a
WSGI server, and bodies that end before their declared length through gunicorn."""

from __future__ import annotations

import hashlib
import io
import socket

import pytest
from django.core.handlers.wsgi import WSGIHandler

from ctxadmin import stack
from sessions_app.artifacts.models import ArtifactHead, ArtifactVersion
from tests.conftest import make_tenant
from tests.test_artifacts import base, counts, error, make_session, save_raw

JSON_SAVE = b'{"data_base64": "aGk=", "mime_type": "text/plain"}'


def stored(name: str = "f.bin") -> list[tuple[int, bytes, str]]:
    return [
        (row.version, bytes(row.data), row.mime_type)
        for row in ArtifactVersion.objects.filter(head__name=name).order_by("version")
    ]


@pytest.mark.django_db
def test_empty_bodies_and_bodies_exactly_at_and_one_past_the_limit(owner, settings):
    make_session(owner)
    api = owner.client()
    settings.CTXADMIN_ARTIFACT_MAX_BYTES = 64
    empty = save_raw(api, f"{base()}/empty", b"", "application/octet-stream")
    assert (empty.status_code, empty.json()["size"]) == (201, 0)
    assert empty.json()["sha256"] == hashlib.sha256(b"").hexdigest()
    # An empty JSON body is a save body without its fields; an empty one with format=raw is
    # an empty artifact.
    assert error(
        api.generic("POST", f"{base()}/e2", b"", content_type="application/json"),
        400,
        "validation_error",
    )["details"] == {"field": "data_base64"}
    assert (
        api.generic("POST", f"{base()}/e2?format=raw", b"", content_type="application/json").json()[
            "size"
        ]
        == 0
    )

    exact = bytes(range(64))
    assert save_raw(api, f"{base()}/f.bin", exact, "application/octet-stream").status_code == 201
    refused = error(
        save_raw(api, f"{base()}/f.bin", exact + b"!", "a/b"), 413, "artifact_too_large"
    )
    assert refused["details"] == {"field": "data", "size": 65, "limit_bytes": 64}
    import base64

    as_json = {"data_base64": base64.b64encode(exact + b"!").decode(), "mime_type": "a/b"}
    error(api.post(f"{base()}/f.bin", as_json, format="json"), 413, "artifact_too_large")
    as_json["data_base64"] = base64.b64encode(exact).decode()
    assert api.post(f"{base()}/f.bin", as_json, format="json").json()["version"] == 1
    assert stored() == [(0, exact, "application/octet-stream"), (1, exact, "a/b")]


@pytest.mark.django_db
def test_every_content_type_is_either_a_save_body_a_stored_mime_type_or_a_400(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/f.bin"
    as_save_body = ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON"]
    for content_type in as_save_body:
        saved = api.generic("POST", url, JSON_SAVE, content_type=content_type)
        assert (saved.status_code, saved.json()["mime_type"]) == (201, "text/plain"), content_type
    form = b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\nb\r\n--x--\r\n'
    kept_as_given = [
        ("multipart/form-data; boundary=x", form),
        ("application/x-www-form-urlencoded", b"a=b&c=d"),
        ("application/vnd.api+json", b'{"x": 1}'),
        ('text/plain; charset="utf-8"', b"\xff\x00 bytes"),
        ("  text/plain  ", b"padded"),
    ]
    for content_type, data in kept_as_given:
        saved = api.generic("POST", url, data, content_type=content_type)
        assert saved.status_code == 201, (content_type, saved.content)
        assert saved.json()["mime_type"] == content_type.strip()
        assert saved.json()["sha256"] == hashlib.sha256(data).hexdigest()
    assert api.generic("POST", url, b"x", content_type="").json()["mime_type"] == (
        "application/octet-stream"
    )
    before = counts()
    for content_type in ("text/pl\xe9in", "a/" + "b" * 254, "text/plain;", "no-slash", "/x"):
        refused = error(
            api.generic("POST", url, b"x", content_type=content_type), 400, "validation_error"
        )
        assert refused["details"] == {"field": "mime_type"}, content_type
    error(api.generic("POST", url, b"{,", content_type="application/json;"), 400, "malformed_json")
    assert counts() == before


@pytest.mark.django_db
def test_a_parameter_given_twice_is_refused_not_read_by_its_last_value(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/f.bin"
    for query in ("format=raw&format=json", "format=json&format=raw", "format=raw&format=raw"):
        refused = error(
            api.generic("POST", f"{url}?{query}", JSON_SAVE, content_type="application/json"),
            400,
            "invalid_parameter",
        )
        assert refused["details"] == {"parameter": "format"}
    assert counts() == (0, 0)
    save_raw(api, url, b"x", "a/b")
    for query in (
        "version=0&version=0",
        "format=raw&format=json",
        "version=0&format=raw&version=1",
    ):
        refused = error(api.get(f"{url}?{query}"), 400, "invalid_parameter")
        assert refused["details"]["parameter"] in ("version", "format")


@pytest.mark.django_db
def test_head_answers_as_get_does_without_the_bytes(owner):
    make_session(owner)
    api = owner.client()
    url = f"{base()}/f.bin"
    save_raw(api, url, b"payload", "image/png")
    for query in ("", "?format=raw", "?version=0", "?format=json&version=0"):
        got, head = api.get(f"{url}{query}"), api.head(f"{url}{query}")
        assert (head.status_code, got.status_code) == (200, 200), (query, head.content)
        assert head["Content-Type"] == got["Content-Type"] and head.content == b""
    assert api.head(f"{url}?version=7").status_code == 404
    assert api.head(f"{url}?format=xml").status_code == 400
    assert error(api.get(f"{url}?format="), 400, "invalid_parameter")


@pytest.mark.django_db
def test_stored_html_is_served_back_as_an_attachment_never_sniffed(owner):
    make_session(owner)
    api = owner.client()
    page = b"<!doctype html><script>document.cookie</script>"
    for name, mime in (("page.html", "text/html"), ("page.svg", "image/svg+xml"), ("untyped", "")):
        api.generic("POST", f"{base()}/{name}", page, content_type=mime)
        raw = api.get(f"{base()}/{name}", {"format": "raw"})
        assert raw.content == page
        assert raw["Content-Type"] == (mime or "application/octet-stream")
        assert raw["X-Content-Type-Options"] == "nosniff"
        assert raw["Content-Disposition"] == f'attachment; filename="{name}"'
    # Names that look like routes or paths are one segment each, or refused.
    assert save_raw(api, f"{base()}/versions", b"x", "a/b").json()["name"] == "versions"
    assert save_raw(api, f"{base()}/user:user:x", b"x", "a/b").json()["scope"] == "user"
    for name in ("%2e%2e", "user:", ".x", "a..b", "a" * 257, "a%00"):
        response = save_raw(api, f"{base()}/{name}", b"x", "a/b")
        assert error(response, 400, "invalid_path_parameter")["details"]["parameter"] == "name"


def _wsgi(tenant, path: str, body: bytes, content_type: str) -> tuple[int, dict]:
    """A chunked POST handed to Django's WSGI handler as a WSGI server would: no
    ``CONTENT_LENGTH``, the de-chunked body on ``wsgi.input``."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "CONTENT_TYPE": content_type,
        "HTTP_TRANSFER_ENCODING": "chunked",
        "HTTP_AUTHORIZATION": f"Bearer {tenant.key}",
    }
    status = []
    answer = b"".join(WSGIHandler()(environ, lambda code, headers, exc=None: status.append(code)))
    import json

    return int(status[0].split()[0]), json.loads(answer)


@pytest.mark.django_db(transaction=True)
def test_chunked_bodies_are_stored_whole_and_limited_like_declared_ones(settings):
    tenant = make_tenant("acme")
    make_session(tenant)
    settings.CTXADMIN_ARTIFACT_MAX_BYTES = 64
    settings.CTXADMIN_MAX_BODY_BYTES = 1024
    path = f"{base()}/f.bin"
    assert _wsgi(tenant, path, b"chunked bytes", "text/plain")[0] == 201
    assert _wsgi(tenant, path, b"", "text/plain")[1]["size"] == 0
    assert _wsgi(tenant, path, JSON_SAVE, "application/json")[1]["mime_type"] == "text/plain"
    status, body = _wsgi(tenant, path, b"x" * 65, "text/plain")
    assert (status, body["error"]["code"]) == (413, "artifact_too_large")
    status, body = _wsgi(tenant, path, b"x" * 1025, "text/plain")
    assert (status, body["error"]["code"]) == (413, "request_too_large")
    assert [(v, d) for v, d, _m in stored()] == [(0, b"chunked bytes"), (1, b""), (2, b"hi")]


def _send(port: int, tenant, head: bytes, body: bytes) -> bytes:
    """One request on a fresh connection whose sending side is then shut: the server sees
    the body end where ``body`` ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(
            b"POST "
            + base().encode()
            + b"/f.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {tenant.key}\r\n".encode()
            + b"Content-Type: text/plain\r\nConnection: close\r\n"
            + head
            + b"\r\n"
            + body
        )
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


@pytest.mark.django_db(transaction=True)
def test_a_body_that_ends_early_through_gunicorn_is_refused_and_stores_nothing(tmp_path):
    from tests.test_outbox_worker import _web_server

    tenant = make_tenant("acme")
    make_session(tenant)
    process, url = _web_server(tmp_path, "redis://127.0.0.1:6379/15")
    port = int(url.rsplit(":", 1)[1])
    try:
        cut = [
            (b"Content-Length: 10\r\n", b"abc"),
            (b"Transfer-Encoding: chunked\r\n", b"a\r\nabc"),
            (b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n"),
        ]
        for head, body in cut:
            answer = _send(port, tenant, head, body)
            assert answer.startswith(b"HTTP/1.1 400 "), answer
            assert b'"code": "incomplete_body"' in answer or b'"code":"incomplete_body"' in answer
        assert ArtifactHead.objects.count() == 0
        whole = _send(port, tenant, b"Transfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n")
        assert whole.startswith(b"HTTP/1.1 201 "), whole
        declared = _send(port, tenant, b"Content-Length: 3\r\n", b"abc")
        assert declared.startswith(b"HTTP/1.1 201 "), declared
        assert [(v, d) for v, d, _m in stored()] == [(0, b"abc"), (1, b"abc")]
    finally:
        stack.terminate_group(process)
