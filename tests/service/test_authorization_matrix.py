"""The authorization matrix: every tenant endpoint and method, called with every credential
that must not get through — no credentials, a revoked key, another app's key, this app's
key without the scope, a tool token without the capability, a logged-in staff user without
the permission — answers 401, 403 or 404 as documented: never 2xx, never another tenant's
data. ``MATRIX`` is the documentation; an endpoint or method missing from it fails."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from ctxadmin.models import SCOPES
from ctxadmin.services import create_api_key, revoke_api_keys
from sessions_app import tool_tokens
from sessions_app.models import Session, ToolToken
from tests.conftest import make_tenant
from tests.service.test_tenant_isolation import SAMPLE, fill, tenant_routes

S, M, C, D, A = "sessions", "memory", "cache", "diagnostics", "admin"
DA = ("delegate", "admin")  # either one
NONE = None  # any key of the app (no scope needed)
TOKEN = "tool-token"  # only a tool token (its identity)

#: route -> method -> (the scope an API key needs, the capability a tool token needs).
#: ``/dev/v1`` routes also take a staff session; their writes need a second scope and a
#: console permission (``DEV_WRITES``).
MATRIX: dict[str, dict[str, tuple[str | None, str | None]]] = {
    "api/v1/apps/<str:app>/": {"get": (D, None), "patch": (A, None)},
    "api/v1/apps/<str:app>/key": {"get": (NONE, None)},
    "api/v1/apps/<str:app>/keys": {"get": (A, None), "post": (A, None)},
    "api/v1/apps/<str:app>/keys/<str:prefix>": {"get": (A, None), "delete": (A, None)},
    "api/v1/apps/<str:app>/keys/<str:prefix>/rotate": {"post": (A, None)},
    "api/v1/apps/<str:app>/sessions": {"get": (S, None)},
    "api/v1/apps/<str:app>/user-tokens": {"get": (DA, None)},
    "api/v1/apps/<str:app>/user-tokens/revoke": {"post": (DA, None)},
    "api/v1/apps/<str:app>/users/<str:user>/state": {"get": (S, "state_read")},
    "api/v1/apps/<str:app>/users/<str:user>/tokens": {"get": (DA, None), "post": (DA, None)},
    "api/v1/apps/<str:app>/users/<str:user>/tokens/<str:prefix>": {
        "get": (DA, None),
        "delete": (DA, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions": {"get": (S, None), "post": (S, None)},
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>": {
        "get": (S, None),
        "delete": (S, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/events": {
        "get": (S, None),
        "post": (S, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/context": {"post": (S, None)},
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/invocations": {"post": (S, None)},
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/invocations/<str:invocation>"
    "/tool-tokens": {"post": (S, None)},
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/invocations/<str:invocation>"
    "/tool-tokens/<str:prefix>": {"delete": (S, None)},
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/state": {"get": (S, "state_read")},
    "api/v1/apps/<str:app>/tool-token": {"get": (TOKEN, "identity")},
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/compaction-policy": {
        "get": (S, None),
        "put": (S, None),
        "delete": (S, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/compactions": {
        "get": (S, None),
        "post": (S, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/compactions/<str:compaction_id>": {
        "get": (S, None)
    },
    "api/v1/apps/<str:app>/compaction-policy": {
        "get": (S, None),
        "put": (S, None),
        "delete": (S, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/memories": {
        "get": (M, "memory_search"),
        "post": (M, "memory_add"),
        "delete": (M, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/memories/search": {"post": (M, "memory_search")},
    # Refreshing TTLs moves expiries: a write, the add capability.
    "api/v1/apps/<str:app>/users/<str:user>/memories/touch": {"post": (M, "memory_add")},
    "api/v1/apps/<str:app>/users/<str:user>/memories/batch": {"post": (M, "memory_add")},
    "api/v1/apps/<str:app>/users/<str:user>/memories/<str:memory_id>/history": {
        "get": (M, "memory_search")
    },
    # It ends the live version: a token needs memory_delete as well (tests/memory).
    "api/v1/apps/<str:app>/users/<str:user>/memories/<str:memory_id>/rollback": {
        "post": (M, "memory_add")
    },
    "api/v1/apps/<str:app>/users/<str:user>/profile": {"get": (M, "memory_search")},
    "api/v1/apps/<str:app>/users/<str:user>/memories/events": {"post": (M, None)},
    "api/v1/apps/<str:app>/users/<str:user>/memories/ingestions": {"post": (M, None)},
    "api/v1/apps/<str:app>/users/<str:user>/memories/consent": {
        "get": (M, None),
        "put": (M, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/memories/legal-hold": {
        "get": (M, None),
        "put": (A, None),
        "delete": (A, None),
    },
    "api/v1/apps/<str:app>/users/<str:user>/memories/erasure-epoch": {"get": (M, None)},
    "api/v1/apps/<str:app>/users/<str:user>/memories/<str:memory_id>": {
        "get": (M, "memory_search"),
        "delete": (M, "memory_delete"),
    },
    "api/v1/apps/<str:app>/memory-policy": {"get": (M, None), "put": (A, None)},
    "api/v1/apps/<str:app>/memory-users": {"get": (M, None)},
    "api/v1/apps/<str:app>/outbox/jobs/<str:job_id>": {"get": (M, None)},
    "api/v1/apps/<str:app>/outbox/jobs/<str:job_id>/cancel": {"post": (M, None)},
    "api/v1/apps/<str:app>/outbox/stats": {"get": (M, None)},
    "api/v1/apps/<str:app>/cache/acquire": {"post": (C, None)},
    "api/v1/apps/<str:app>/cache/invalidate": {"post": (C, None)},
    "api/v1/apps/<str:app>/cache/scopes/<str:fingerprint>": {"get": (C, None)},
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/artifacts": {
        "get": (S, "artifact_list")
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/artifacts/<str:name>": {
        "get": (S, "artifact_get"),
        "post": (S, "artifact_put"),
        "delete": (S, "artifact_delete"),
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/artifacts/<str:name>/attach": {
        "post": (S, "artifact_attach")
    },
    "api/v1/apps/<str:app>/users/<str:user>/sessions/<str:sid>/artifacts/<str:name>/versions": {
        "get": (S, "artifact_list_versions")
    },
    "api/v1/apps/<str:app>/checkpoints": {"get": (S, None)},
    "api/v1/apps/<str:app>/threads/<str:thread>": {"delete": (S, None)},
    "api/v1/apps/<str:app>/threads/<str:thread>/checkpoints": {"get": (S, None), "post": (S, None)},
    "api/v1/apps/<str:app>/threads/<str:thread>/checkpoints/<str:checkpoint_id>": {
        "get": (S, None)
    },
    "api/v1/apps/<str:app>/threads/<str:thread>/checkpoints/<str:checkpoint_id>/writes": {
        "post": (S, None)
    },
    "dev/v1/context/<str:app>/<str:user>/<str:sid>": {"get": (D, None)},
    "dev/v1/context/<str:app>/<str:user>/<str:sid>/lifecycle": {"get": (D, None)},
    "dev/v1/context/<str:app>/<str:user>/<str:sid>/cache/invalidate": {"post": (D, None)},
    "dev/v1/memory/<str:app>/<str:user>/search": {"post": (D, None)},
    "dev/v1/memory/<str:app>/<str:user>/erase": {"post": (D, None)},
    "dev/v1/outbox/<str:app>/stats": {"get": (D, None)},
    "dev/v1/outbox/<str:app>/jobs/<str:job_id>": {"get": (D, None)},
}
#: ``/dev/v1`` writes: (the second scope a key needs, the permission a staff user needs).
DEV_WRITES = {
    ("dev/v1/context/<str:app>/<str:user>/<str:sid>/cache/invalidate", "post"): (
        C,
        "caching.invalidate_cachescope",
    ),
    ("dev/v1/memory/<str:app>/<str:user>/erase", "post"): (M, "memory.erase_memoryentry"),
}

ROUTES = tenant_routes()
CASES = [(route, method) for route, methods in ROUTES for method in methods]


def test_every_endpoint_and_method_is_in_the_matrix():
    found = {route: set(methods) for route, methods in ROUTES}
    documented = {route: set(methods) for route, methods in MATRIX.items()}
    assert found == documented


@pytest.mark.parametrize(("route", "method"), CASES)
def test_the_views_require_what_the_matrix_documents(route, method):
    from django.urls import resolve

    view = resolve(fill(route, "acme")).func.view_class
    scope, capability = MATRIX[route][method]
    verb = method.upper()
    declared = view.required_scopes.get(verb, view.required_scopes.get("*"))
    if scope is TOKEN:
        assert declared is None
    else:
        assert declared == scope
    caps = view.tool_capabilities
    assert caps.get(verb, caps.get("*")) == capability


@pytest.fixture
def world(db):
    owner = make_tenant("acme")
    outsider = make_tenant("globex")
    _key, revoked = create_api_key(owner.app, list(SCOPES), name="revoked")
    revoke_api_keys(owner.app.api_keys.filter(name="revoked"))
    session = Session.objects.create(
        app=owner.app, user_id=SAMPLE["user"], session_id=SAMPLE["sid"]
    )
    answer = owner.client().post(
        f"/api/v1/apps/acme/users/{SAMPLE['user']}/sessions/{SAMPLE['sid']}/invocations",
        {
            "invocation_id": SAMPLE["invocation"],
            "input": {"role": "user", "parts": [{"text": "call:probe {}"}]},
            "agent": {"provider": "fake", "model": "fake-1", "declarations": [{"name": "probe"}]},
            "cache": "off",
        },
        format="json",
    )
    assert answer.status_code == 201, answer.content
    return {"owner": owner, "outsider": outsider, "revoked": revoked, "session": session}


def _token(world, capabilities: list[str]) -> str:
    _token_row, raw = tool_tokens.mint(
        world["owner"].app,
        world["session"],
        SAMPLE["invocation"],
        {"tool_name": "probe", "capabilities": capabilities},
        world["owner"].app.api_keys.get(name="acme owner"),
    )
    return raw


def _call(client: APIClient, method: str, path: str):
    if method in ("post", "put", "patch"):
        return getattr(client, method)(path, {}, format="json")
    return getattr(client, method)(path)


def _bearer(credential: str | None) -> APIClient:
    client = APIClient()
    if credential:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {credential}")
    return client


@pytest.mark.parametrize(("route", "method"), CASES)
def test_no_credential_that_must_not_get_through_does(route, method, world):
    scope, capability = MATRIX[route][method]
    owner, outsider = world["owner"], world["outsider"]
    path = fill(route, "acme")
    outcomes: dict[str, tuple[int, int | tuple[int, ...]]] = {}

    outcomes["anonymous"] = (_call(APIClient(), method, path).status_code, 401)
    outcomes["revoked key"] = (_call(_bearer(world["revoked"]), method, path).status_code, 401)
    outcomes["another app's key"] = (_call(_bearer(outsider.key), method, path).status_code, 404)
    if scope is TOKEN:
        outcomes["this app's key (not a tool token)"] = (
            _call(_bearer(owner.key), method, path).status_code,
            404,
        )
    elif scope is not NONE:
        needed = scope if isinstance(scope, tuple) else (scope,)
        without = [s for s in SCOPES if s not in needed]
        _row, key = create_api_key(owner.app, without, name=f"without {scope}")
        outcomes[f"key without {scope}"] = (_call(_bearer(key), method, path).status_code, 403)
    if capability != "identity":
        others = [c for c in ToolToken.CAPABILITIES if c != capability]
        token = _bearer(_token(world, others))
        outcomes[f"tool token without {capability}"] = (
            _call(token, method, path).status_code,
            403,
        )
    staff = get_user_model().objects.create_user(
        "staff-without-permission", password="staff-pass-123", is_staff=True
    )
    session_client = APIClient()
    session_client.force_login(staff)
    write = DEV_WRITES.get((route, method))
    if route.startswith("dev/"):
        if write is not None:
            # Staff, but without the console permission of this write.
            outcomes["staff without the permission"] = (
                _call(session_client, method, path).status_code,
                403,
            )
            _row, key = create_api_key(owner.app, [D], name="diagnostics only")
            outcomes[f"diagnostics key without {write[0]}"] = (
                _call(_bearer(key), method, path).status_code,
                403,
            )
        staff.is_staff = False
        staff.save()
        session_client.force_login(staff)
        outcomes["a logged-in user who is not staff"] = (
            _call(session_client, method, path).status_code,
            403,
        )
    else:
        # A console login is not an API credential.
        staff.user_permissions.add(*Permission.objects.all())
        outcomes["staff with every permission"] = (
            _call(session_client, method, path).status_code,
            401,
        )
    wrong = {who: got for who, (got, expected) in outcomes.items() if got != expected}
    assert not wrong, {who: (outcomes[who][0], outcomes[who][1]) for who in wrong}
