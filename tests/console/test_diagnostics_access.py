"""Who may call the diagnostics API (keys of another app, scopes, staff sessions, CSRF), and
that nothing it answers carries event text, state values, memory text, prefixes, resource
names or credentials."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from caching.models import CacheScope
from ctxadmin.services import create_api_key
from memory.models import MemoryEntry
from tests.console.diagnostics_helpers import (
    CONTEXT,
    INVALIDATE,
    LIFECYCLE,
    MARK,
    MEMORY,
    MODEL,
    SECRET,
    SID,
    USER,
    assert_clean,
    assert_seeded,
    cache_unchanged,
    confirmation,
    endpoints,
    operator,
    send,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("quiet_tasks")]

# ----------------------------------------------------------------------------- leaks


def test_no_diagnostics_response_carries_content_or_secrets(world, staff):
    assert_seeded(world)
    bodies = []
    for client in (world.owner.client(), staff):
        for method, url, data in endpoints(world):
            if url.endswith("/erase") or url.endswith("/invalidate"):
                continue  # the writes run once, below
            response = send(client, method, url, data)
            assert response.status_code == 200, (url, response.content)
            bodies.append(response.content)
        for url in (f"{CONTEXT}?max_bytes=200", f"{LIFECYCLE}?model={MODEL}", LIFECYCLE):
            bodies.append(client.get(url).content)
        # Errors name fields, never their values.
        bodies.append(
            client.post(INVALIDATE, confirmation(world, model=MARK), format="json").content
        )
        bodies.append(client.post(f"{MEMORY}/search", {"query": SECRET}, format="json").content)
    bodies.append(world.owner.client().post(INVALIDATE, confirmation(world), format="json").content)
    bodies.append(
        staff.post(f"{MEMORY}/erase", {"confirm": f"erase user {USER}"}, format="json").content
    )
    assert len(bodies) == 22
    assert_clean(world, *bodies)


# ----------------------------------------------------------------------------- who may call


def test_a_diagnostics_key_of_another_app_gets_404_everywhere(world):
    _key, raw = create_api_key(world.outsider.app, ["diagnostics", "cache", "memory"])
    client = world.outsider.client(raw)
    for method, url, data in endpoints(world):
        response = send(client, method, url, data)
        assert response.status_code == 404, (url, response.content)
        assert response.json()["error"]["code"] == "not_found"
    # Its own app answers (an empty one: the session is not there).
    assert client.get("/dev/v1/outbox/globex/stats").status_code == 200
    assert client.get(f"/dev/v1/context/globex/{USER}/{SID}").status_code == 404
    cache_unchanged(world, 1)
    assert MemoryEntry.objects.filter(user_id=USER).count() == 2


def test_a_key_without_the_diagnostics_scope_gets_403(world):
    _key, raw = create_api_key(world.owner.app, ["sessions", "memory", "cache", "admin"])
    client = world.owner.client(raw)
    for method, url, data in endpoints(world):
        response = send(client, method, url, data)
        assert response.status_code == 403, (url, response.content)
        error = response.json()["error"]
        assert error["code"] == "permission_denied" and "diagnostics" in error["message"]
    cache_unchanged(world, 1)


def test_the_writes_also_need_the_domain_scope(world):
    _key, raw = create_api_key(world.owner.app, ["diagnostics"])
    client = world.owner.client(raw)
    for method, url, data in endpoints(world):
        response = send(client, method, url, data)
        if url.endswith("/invalidate"):
            assert response.status_code == 403 and "'cache'" in response.json()["error"]["message"]
        elif url.endswith("/erase"):
            assert response.status_code == 403 and "'memory'" in response.json()["error"]["message"]
        else:
            assert response.status_code == 200, (url, response.content)
    cache_unchanged(world, 1)
    assert MemoryEntry.objects.filter(user_id=USER).count() == 2


def test_a_staff_session_reaches_every_app(world, staff):
    for method, url, data in endpoints(world):
        if url.endswith("/erase"):
            continue
        response = send(staff, method, url, data)
        assert response.status_code == 200, (url, response.content)
    assert CacheScope.objects.get(fingerprint=world.scope_fingerprint).generation == 2
    # Another app: its own data, or 404 for what it does not have; a missing app is 404.
    assert staff.get("/dev/v1/outbox/globex/stats").json()["app"] == "globex"
    assert staff.get(f"/dev/v1/context/globex/{USER}/{SID}").status_code == 404
    assert staff.get("/dev/v1/outbox/nosuchapp/stats").status_code == 404
    assert staff.get("/dev/v1/outbox/acme/stats?x=1").json()["error"]["code"] == (
        "unknown_parameter"
    )
    assert staff.get("/dev/v1/outbox/bad.app/stats").status_code == 400
    receipt = staff.post(f"{MEMORY}/erase", {"confirm": f"erase user {USER}"}, format="json")
    assert receipt.status_code == 200, receipt.content
    operator = get_user_model().objects.get(username="operator")
    assert receipt.json()["erased_by"] == f"op:{operator.pk}"


def test_a_staff_session_without_the_permissions_only_reads(world):
    client = APIClient()
    client.force_login(operator(writes=False))
    for method, url, data in endpoints(world):
        response = send(client, method, url, data)
        if method == "post" and not url.endswith("/search"):
            assert response.status_code == 403, (url, response.content)
            error = response.json()["error"]
            assert error["code"] == "permission_denied" and "permission" in error["message"]
        else:
            assert response.status_code == 200, (url, response.content)
    cache_unchanged(world, 1)
    assert MemoryEntry.objects.filter(user_id=USER).count() == 2


def test_a_staff_session_needs_the_csrf_token_to_write(world):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(operator())
    assert client.get(CONTEXT).status_code == 200
    refused = client.post(INVALIDATE, confirmation(world), format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    cache_unchanged(world, 1)
    token = "abcdefghijklmnopqrstuvwxyzABCDEF"  # a CSRF secret, as the cookie carries it
    client.cookies["csrftoken"] = token
    accepted = client.post(INVALIDATE, confirmation(world), format="json", HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 200, accepted.content


def test_a_non_staff_session_gets_403_and_anonymous_401(world):
    user = get_user_model().objects.create_user("someone", password="pw")
    member = APIClient()
    member.force_login(user)
    anonymous = APIClient()
    for method, url, data in endpoints(world):
        response = send(member, method, url, data)
        assert response.status_code == 403, (url, response.content)
        assert response.json()["error"]["code"] == "permission_denied"
        response = send(anonymous, method, url, data)
        assert response.status_code == 401, (url, response.content)
        assert response.json()["error"]["code"] == "not_authenticated"
        assert response["WWW-Authenticate"].startswith("Bearer")
    cache_unchanged(world, 1)
    assert MemoryEntry.objects.filter(user_id=USER).count() == 2
