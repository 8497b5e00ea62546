"""Authentication, tenancy and scopes across every tenant endpoint of the URL configuration."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from ctxadmin.models import ApiKey
from ctxadmin.services import create_api_key, revoke_api_keys

SAMPLE = {
    "user": "alice",
    "sid": "s-1",
    "prefix": "abcdefghij",
    "compaction_id": "00000000-0000-4000-8000-000000000001",
    "memory_id": "00000000-0000-4000-8000-000000000002",
    "job_id": "00000000-0000-4000-8000-000000000003",
    "fingerprint": "0" * 64,
    "invocation": "inv-1",
    "name": "report.txt",
    "thread": "thread-1",
    "checkpoint_id": "1f0a0000-0000-6000-8000-000000000001",
}
METHODS = ("get", "post", "put", "patch", "delete")


def tenant_routes():
    """Every API route with an ``{app}`` segment, with the methods its view implements."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                route = prefix + str(pattern.pattern)
                if "<str:app>" in route:
                    view = pattern.callback.view_class
                    methods = [m for m in METHODS if hasattr(view, m)]
                    yield route, methods

    return list(walk(get_resolver().url_patterns))


def fill(route: str, app: str) -> str:
    def value(match):
        name = match.group(1)
        return app if name == "app" else SAMPLE[name]

    return "/" + re.sub(r"<str:(\w+)>", value, route)


ROUTES = tenant_routes()


def test_the_route_walk_finds_the_tenant_endpoints():
    paths = {route for route, _ in ROUTES}
    assert "api/v1/apps/<str:app>/" in paths
    assert "api/v1/apps/<str:app>/keys/<str:prefix>" in paths


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "methods"), ROUTES)
def test_another_apps_key_gets_404_on_every_method(route, methods, owner, outsider):
    url = fill(route, owner.app.name)
    for method in methods:
        response = getattr(outsider.client(), method)(url, {}, format="json")
        assert response.status_code == 404, (method, url, response.content)
        assert response.json()["error"]["code"] == "not_found"
        # The answer names only what the request sent: exactly what an app that never
        # existed gets.
        missing = getattr(outsider.client(), method)(fill(route, "never-was"), {}, format="json")
        assert response.content.decode().replace(owner.app.name, "never-was") == (
            missing.content.decode()
        )


@pytest.mark.django_db
@pytest.mark.parametrize(("route", "methods"), ROUTES)
def test_missing_wrong_and_revoked_keys_get_401(route, methods, owner, anonymous):
    url = fill(route, owner.app.name)
    revoked_key, revoked_raw = create_api_key(owner.app, ["sessions", "diagnostics", "admin"])
    revoke_api_keys(ApiKey.objects.filter(pk=revoked_key.pk))
    wrong = owner.key[:-4] + ("AAAA" if not owner.key.endswith("AAAA") else "BBBB")
    credentials = {
        "missing": None,
        "garbage": "Bearer not-a-key",
        "wrong secret": f"Bearer {wrong}",
        "revoked": f"Bearer {revoked_raw}",
    }
    for method in methods:
        for label, header in credentials.items():
            extra = {"HTTP_AUTHORIZATION": header} if header else {}
            response = getattr(anonymous, method)(url, {}, format="json", **extra)
            assert response.status_code == 401, (label, method, url)
            body = response.json()["error"]
            assert body["code"] in {"not_authenticated", "authentication_failed"}
            assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
def test_a_key_without_the_scope_gets_403(owner, anonymous):
    _key, sessions_only = create_api_key(owner.app, ["sessions"])
    client = owner.client(sessions_only)
    response = client.get(f"/api/v1/apps/{owner.app.name}/")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert "diagnostics" in response.json()["error"]["message"]
    # The same key may read its own metadata, which needs no scope.
    mine = client.get(f"/api/v1/apps/{owner.app.name}/key")
    assert mine.status_code == 200
    assert mine.json()["scopes"] == ["sessions"]
    assert client.patch(f"/api/v1/apps/{owner.app.name}/", {"display_name": "x"}).status_code == 403
    assert client.get(f"/api/v1/apps/{owner.app.name}/keys").status_code == 403


@pytest.mark.django_db
def test_the_owner_reads_its_summary_without_content(owner, outsider):
    response = owner.client().get(f"/api/v1/apps/{owner.app.name}/")
    assert response.status_code == 200
    body = response.json()
    assert body["app"] == "acme"
    assert body["api_keys"] == {"active": 1, "revoked": 0}
    assert owner.key not in response.content.decode()


@pytest.mark.django_db
def test_a_revoked_key_stops_working_at_once(owner):
    key, raw = create_api_key(owner.app, ["diagnostics"])
    client = owner.client(raw)
    assert client.get(f"/api/v1/apps/{owner.app.name}/").status_code == 200
    response = owner.client().delete(f"/api/v1/apps/{owner.app.name}/keys/{key.prefix}")
    assert response.status_code == 204
    assert client.get(f"/api/v1/apps/{owner.app.name}/").status_code == 401
    listed = owner.client().get(f"/api/v1/apps/{owner.app.name}/keys/{key.prefix}").json()
    assert listed["state"] == "revoked"


@pytest.mark.django_db
def test_an_outsider_cannot_revoke_or_see_another_apps_key(owner, outsider):
    key, _raw = create_api_key(owner.app, ["sessions"])
    url = f"/api/v1/apps/{outsider.app.name}/keys/{key.prefix}"
    assert outsider.client().get(url).status_code == 404
    assert outsider.client().delete(url).status_code == 404
    key.refresh_from_db()
    assert key.revoked_at is None


@pytest.mark.django_db
def test_use_is_recorded_on_the_key(owner):
    key = owner.app.api_keys.get()
    assert key.last_used_at is None
    owner.client().get(f"/api/v1/apps/{owner.app.name}/key")
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_subclasses_cannot_bypass_the_scoped_queryset():
    from ctxadmin.api.views import AppScopedView

    with pytest.raises(TypeError, match="get_queryset"):

        class Sneaky(AppScopedView):
            def get_queryset(self):  # pragma: no cover - never called
                return ApiKey.objects.all()
