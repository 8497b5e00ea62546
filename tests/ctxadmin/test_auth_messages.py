"""Authentication and media-type errors say what to send instead, and never echo the
credential."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.ctxadmin.test_api_base import assert_envelope

pytestmark = pytest.mark.django_db


def _url(owner) -> str:
    return f"/api/v1/apps/{owner.app.name}/"


@pytest.mark.parametrize("scheme", ["Token", "ApiKey", "Basic"])
def test_a_key_sent_with_another_scheme_is_told_to_use_bearer(owner, scheme):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {owner.key}")
    answer = client.get(_url(owner))
    error = assert_envelope(answer, 401, "authentication_failed")
    assert "Authorization: Bearer <key>" in error["message"]
    assert f"scheme '{scheme}' is not accepted" in error["message"]
    assert owner.key not in answer.content.decode()


@pytest.mark.parametrize("header", ["{key}", " {key} ", "{key}\t"])
def test_a_key_sent_without_a_scheme_is_told_the_scheme_is_missing(owner, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header.format(key=owner.key))
    answer = client.get(_url(owner))
    error = assert_envelope(answer, 401, "authentication_failed")
    assert error["message"] == (
        "The Authorization header has no scheme before the key: "
        "send it as 'Authorization: Bearer <key>'."
    )
    assert "this scheme" not in error["message"]
    assert owner.key not in answer.content.decode()


def test_a_scheme_that_is_not_a_word_is_not_echoed(owner):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"x-{owner.key[:12]} {owner.key}")
    error = assert_envelope(client.get(_url(owner)), 401, "authentication_failed")
    assert owner.key[:12] not in error["message"]
    assert "does not start with a scheme ctxadmin accepts" in error["message"]


def test_a_key_in_x_api_key_is_told_which_header_to_use(owner):
    answer = APIClient().get(_url(owner), HTTP_X_API_KEY=owner.key)
    error = assert_envelope(answer, 401, "authentication_failed")
    assert "Authorization header" in error["message"] and "X-API-Key" in error["message"]
    assert owner.key not in answer.content.decode()


def test_no_credential_at_all_is_still_not_authenticated(owner):
    assert_envelope(APIClient().get(_url(owner)), 401, "not_authenticated")


def test_a_form_body_is_told_to_send_json(owner):
    answer = owner.client().generic(
        "PATCH", _url(owner), b"display_name=x", content_type="application/x-www-form-urlencoded"
    )
    error = assert_envelope(answer, 415, "unsupported_media_type")
    assert "application/json" in error["message"]
