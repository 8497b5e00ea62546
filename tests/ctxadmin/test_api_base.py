"""The error envelope, strict JSON, body limits, path and query validation, pagination."""

from __future__ import annotations

import pytest
from django.test import override_settings

from ctxadmin.services import create_api_key


def assert_envelope(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


def raw_patch(client, url: str, body: bytes, **extra):
    return client.generic("PATCH", url, body, content_type="application/json", **extra)


@pytest.mark.django_db
class TestMalformedBodies:
    @pytest.fixture
    def url(self, owner):
        return f"/api/v1/apps/{owner.app.name}/"

    def test_malformed_json(self, owner, url):
        error = assert_envelope(
            raw_patch(owner.client(), url, b'{"display_name": '), 400, "malformed_json"
        )
        assert "line 1" in error["message"]

    def test_invalid_utf8(self, owner, url):
        assert_envelope(
            raw_patch(owner.client(), url, b'{"display_name": "\xff\xfe"}'), 400, "invalid_utf8"
        )

    def test_duplicate_keys(self, owner, url):
        body = b'{"display_name": "a", "display_name": "b"}'
        assert_envelope(raw_patch(owner.client(), url, body), 400, "malformed_json")

    def test_nan_is_not_json(self, owner, url):
        assert_envelope(
            raw_patch(owner.client(), url, b'{"display_name": NaN}'), 400, "malformed_json"
        )

    def test_huge_number(self, owner, url):
        body = b'{"display_name": ' + b"9" * 400 + b"}"
        assert_envelope(raw_patch(owner.client(), url, body), 400, "number_out_of_range")

    def test_nul_character(self, owner, url):
        body = b'{"display_name": "a\\u0000b"}'
        assert_envelope(raw_patch(owner.client(), url, body), 400, "invalid_characters")

    def test_deep_nesting(self, owner, url):
        body = b'{"display_name": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        assert_envelope(raw_patch(owner.client(), url, body), 400, "json_too_deep")

    def test_unknown_key_is_rejected_and_nothing_changes(self, owner, url):
        error = assert_envelope(
            owner.client().patch(url, {"display_name": "New", "colour": "red"}, format="json"),
            400,
            "validation_error",
        )
        assert error["details"] == {"field": "colour"}
        assert error["message"] == "colour: Unknown field."
        owner.app.refresh_from_db()
        assert owner.app.display_name == ""

    def test_field_validation_names_the_field(self, owner, url):
        error = assert_envelope(
            owner.client().patch(url, {"display_name": "x" * 201}, format="json"),
            400,
            "validation_error",
        )
        assert error["message"].startswith("display_name:")
        assert error["details"] == {"field": "display_name"}

    def test_a_valid_patch_applies(self, owner, url):
        response = owner.client().patch(url, {"display_name": "Acme Corp"}, format="json")
        assert response.status_code == 200
        assert response.json()["display_name"] == "Acme Corp"

    def test_unsupported_media_type(self, owner, url):
        response = owner.client().generic(
            "PATCH", url, b"display_name=x", content_type="text/plain"
        )
        assert_envelope(response, 415, "unsupported_media_type")


@pytest.mark.django_db
@override_settings(CTXADMIN_MAX_BODY_BYTES=2048)
def test_an_oversized_body_gets_413_before_it_is_read(owner):
    url = f"/api/v1/apps/{owner.app.name}/"
    body = b'{"display_name": "' + b"x" * 4096 + b'"}'
    error = assert_envelope(raw_patch(owner.client(), url, body), 413, "request_too_large")
    assert error["details"] == {"limit_bytes": 2048}
    owner.app.refresh_from_db()
    assert owner.app.display_name == ""


@pytest.mark.django_db
@override_settings(CTXADMIN_MAX_BODY_BYTES=2048)
def test_an_oversized_chunked_body_gets_413(owner):
    url = f"/api/v1/apps/{owner.app.name}/"
    body = b'{"display_name": "' + b"x" * 4096 + b'"}'
    response = owner.client().generic(
        "PATCH",
        url,
        body,
        content_type="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert_envelope(response, 413, "request_too_large")


@pytest.mark.django_db
def test_method_not_allowed(owner):
    response = owner.client().post(f"/api/v1/apps/{owner.app.name}/key", {}, format="json")
    assert_envelope(response, 405, "method_not_allowed")


@pytest.mark.django_db
def test_unknown_api_url_is_a_404_envelope(owner):
    assert_envelope(owner.client().get("/api/v1/nothing-here"), 404, "not_found")


@pytest.mark.django_db
def test_unknown_query_parameter(owner):
    error = assert_envelope(
        owner.client().get(f"/api/v1/apps/{owner.app.name}/?verbose=1"), 400, "unknown_parameter"
    )
    assert error["details"]["unknown"] == ["verbose"]


@pytest.mark.django_db
@pytest.mark.parametrize("prefix", ["ABCDEFGHIJ", "short", "abcdefghi%C3%A9", "abcdefghi%00"])
def test_invalid_path_segment(owner, prefix):
    response = owner.client().get(f"/api/v1/apps/{owner.app.name}/keys/{prefix}")
    error = assert_envelope(response, 400, "invalid_path_parameter")
    assert error["details"] == {"parameter": "prefix"}


@pytest.mark.django_db
def test_path_traversal_matches_no_route(owner):
    response = owner.client().get(f"/api/v1/apps/{owner.app.name}/keys/..%2F..%2Fkey")
    assert_envelope(response, 404, "not_found")


@pytest.mark.django_db
def test_cursor_pagination_walks_every_key_once(owner):
    made = {owner.app.api_keys.get().prefix}
    for _ in range(6):
        key, _raw = create_api_key(owner.app, ["memory"])
        made.add(key.prefix)
    seen: list[str] = []
    url = f"/api/v1/apps/{owner.app.name}/keys?limit=3"
    pages = 0
    while url:
        body = owner.client().get(url).json()
        assert len(body["results"]) <= 3
        seen.extend(item["prefix"] for item in body["results"])
        url = body["next"]
        pages += 1
    assert pages == 3
    assert sorted(seen) == sorted(made)
    assert len(seen) == len(set(seen))


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["limit=0", "limit=abc", "limit=100000", "cursor=bm9wZQ"])
def test_bad_pagination_parameters(owner, query):
    response = owner.client().get(f"/api/v1/apps/{owner.app.name}/keys?{query}")
    code = "invalid_cursor" if query.startswith("cursor") else "invalid_parameter"
    assert_envelope(response, 400, code)


def test_strict_serializer_rejects_unknown_keys():
    from rest_framework import serializers

    from ctxadmin.api.serializers import StrictSerializer

    class Probe(StrictSerializer):
        name = serializers.CharField()

    bad = Probe(data={"name": "a", "extra": 1})
    assert not bad.is_valid()
    assert bad.errors == {"extra": ["Unknown field."]}
    assert Probe(data={"name": "a"}).is_valid()


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/apps/acme/key", "/dev/v1/", "/healthz", "/metrics"])
def test_a_foreign_host_header_gets_the_envelope_without_the_host(owner, path):
    answer = owner.client().get(path, HTTP_HOST="attacker-host.invalid")
    error = assert_envelope(answer, 400, "disallowed_host")
    assert answer["Content-Type"] == "application/json"
    assert "attacker-host" not in answer.content.decode()
    assert error["details"] == {}


@pytest.mark.django_db
def test_the_console_keeps_its_own_page_for_a_foreign_host(client):
    answer = client.get("/admin/", HTTP_HOST="attacker-host.invalid")
    assert answer.status_code == 400
    assert answer["Content-Type"].startswith("text/html")
    assert "attacker-host" not in answer.content.decode()


@pytest.mark.parametrize("number", [2**63 - 1, -(2**63), 0, -1])
def test_every_64_bit_integer_is_accepted_by_the_strict_decoder(number):
    from ctxadmin.api.jsonsafe import loads_strict

    assert loads_strict(f'{{"n": {number}}}'.encode(), 32) == {"n": number}


@pytest.mark.parametrize("number", [2**63, -(2**63) - 1, 10**30])
def test_an_integer_past_64_bits_is_refused_by_the_strict_decoder(number):
    from ctxadmin.api.jsonsafe import JsonInputError, loads_strict

    with pytest.raises(JsonInputError) as raised:
        loads_strict(f'{{"n": {number}}}'.encode(), 32)
    assert raised.value.code == "number_out_of_range"
