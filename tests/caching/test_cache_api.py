"""The prefix-cache API: acquire, status, invalidate; validation, scopes and tenancy; the
OpenAPI document; and content-freedom of responses, logs, metrics and console pages."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from caching import registry
from caching.models import CacheEntry
from ctxadmin.services import create_api_key
from tests.cache_helpers import PREFIX_MARKER, body, prefix, scope
from tests.conftest import make_tenant
from tests.sessions_app.test_sessions_schema import check

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fake")]


@pytest.fixture
def acme():
    return make_tenant("acme")


def _url(app: str, path: str) -> str:
    return f"/api/v1/apps/{app}/cache/{path}"


def _acquire(client, value, app="acme"):
    return client.post(_url(app, "acquire"), value, format="json")


def test_acquire_status_invalidate_flow(acme, fake):
    api = acme.client()
    created = _acquire(api, body())
    assert created.status_code == 200, created.content
    check("CacheAcquired", created.json())
    assert created.json()["status"] == "created"
    hit = _acquire(api, body()).json()
    assert hit["status"] == "hit" and hit["lease"]
    fp = hit["scope_fingerprint"]

    status = api.get(_url("acme", f"scopes/{fp}"))
    assert status.status_code == 200
    check("CacheScopeStatus", status.json())
    data = status.json()
    assert (data["entries"], data["in_flight"], data["waiters"], data["generation"]) == (1, 0, 0, 1)
    assert (
        data["earliest_expiry"]
        and data["live_entries"][0]["prefix_fingerprint"] == hit["prefix_fingerprint"]
    )

    invalidated = api.post(_url("acme", "invalidate"), {"scope": scope()}, format="json")
    assert invalidated.status_code == 200
    check("CacheInvalidated", invalidated.json())
    assert invalidated.json() == {
        "scope_fingerprint": fp,
        "generation": 2,
        "entries_invalidated": 1,
        "creates_in_flight": 0,
    }
    with pytest.raises(registry.LeaseError, match="lease_expired"):
        registry.resolve(acme.app, hit["lease"])
    registry.cleanup()
    assert fake.deletes == 1 and fake.resources == {}
    again = api.post(_url("acme", "invalidate"), {"scope_fingerprint": fp}, format="json")
    assert again.json()["generation"] == 3 and again.json()["entries_invalidated"] == 0


def test_bypass_answers_are_documented(acme):
    answer = _acquire(acme.client(), body(prefix_={"system_instruction": "tiny"}))
    assert answer.status_code == 200
    check("CacheAcquired", answer.json())
    assert answer.json()["status"] == "bypass" and answer.json()["reason"] == "below_minimum"


def test_error_failure_mode_answers_502_and_leaves_nothing(acme, settings):
    settings.CTXADMIN_CACHE_FAKE_FAILURE = "provider_unavailable"
    answer = _acquire(acme.client(), body(scope(failure_mode="error")))
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "cache_provider_error"
    assert answer.json()["error"]["details"] == {"provider_code": "provider_unavailable"}
    assert not CacheEntry.objects.filter(state__in=("creating", "active")).exists()
    bypass = _acquire(acme.client(), body(scope(failure_mode="bypass")))
    assert bypass.json()["reason"] == "provider_error"


@pytest.mark.parametrize(
    ("value", "code", "field"),
    [
        ({**body(), "extra": 1}, "validation_error", "extra"),
        (body(scope(api_key="sk-123")), "sensitive_cache_scope", "scope.policy.api_key"),
        (
            body(scope(labels={"team": "a", "client_secret": "x"})),
            "sensitive_cache_scope",
            "scope.policy.labels.client_secret",
        ),
        (body(scope(colour="red")), "validation_error", "scope.policy.colour"),
        (body({**scope(), "region": "eu"}), "validation_error", "scope.region"),
        (
            body(scope(default_ttl_ms=20_000, max_ttl_ms=10_000)),
            "validation_error",
            "scope.policy.default_ttl_ms",
        ),
        (body(scope(max_ttl_ms=10_000), ttl_ms=20_000), "ttl_exceeds_max", "ttl_ms"),
        (body(ttl_ms=10), "validation_error", "ttl_ms"),
        (body(scope(provider="openai")), "validation_error", "scope.provider"),
        (body(scope(failure_mode="retry")), "validation_error", "scope.policy.failure_mode"),
        (body(prefix_={}), "validation_error", "prefix"),
        (
            body(prefix_={"contents": [{"role": "system", "parts": [{"text": "x"}]}]}),
            "validation_error",
            "prefix.contents[0].role",
        ),
        (
            body(prefix_={"contents": [{"role": "user", "parts": [{"txt": "x"}]}]}),
            "validation_error",
            "prefix.contents[0].parts[0].txt",
        ),
        ({**body(), "timeout_ms": 0}, "validation_error", "timeout_ms"),
        ({"prefix": prefix()}, "validation_error", "scope"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error_and_writes_nothing(acme, fake, value, code, field):
    answer = _acquire(acme.client(), value)
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert (error["code"], error["details"].get("field")) == (code, field)
    assert "sk-123" not in answer.content.decode()
    assert fake.creates == 0 and CacheEntry.objects.count() == 0


def test_the_secret_check_comes_before_every_other_check(acme):
    value = {"scope": {"policy": {"password": "hunter2"}}, "bogus": True}
    error = _acquire(acme.client(), value).json()["error"]
    assert error["code"] == "sensitive_cache_scope"
    assert "hunter2" not in error["message"]


def test_invalidate_needs_exactly_one_target_and_a_known_scope(acme):
    api = acme.client()
    for value in (
        {},
        {"scope": scope(), "scope_fingerprint": "0" * 64},
        {"scope_fingerprint": "x"},
    ):
        assert api.post(_url("acme", "invalidate"), value, format="json").status_code == 400
    missing = api.post(_url("acme", "invalidate"), {"scope": scope("nobody")}, format="json")
    assert missing.status_code == 404
    assert api.get(_url("acme", "scopes/" + "a" * 64)).status_code == 404
    assert api.get(_url("acme", "scopes/not-hex")).status_code == 400


def test_another_apps_scope_is_a_404_and_the_cache_scope_is_required(acme):
    globex = make_tenant("globex")
    fp = _acquire(acme.client(), body()).json()["scope_fingerprint"]
    assert globex.client().get(_url("globex", f"scopes/{fp}")).status_code == 404
    outsider = globex.client().post(
        _url("globex", "invalidate"), {"scope_fingerprint": fp}, format="json"
    )
    assert outsider.status_code == 404
    assert acme.client(globex.key).get(_url("acme", f"scopes/{fp}")).status_code == 404
    _key, sessions_only = create_api_key(acme.app, ["sessions"], name="no cache")
    for answer in (
        acme.client(sessions_only).get(_url("acme", f"scopes/{fp}")),
        _acquire(acme.client(sessions_only), body()),
    ):
        assert answer.status_code == 403
    # The same scope body in another app is another scope.
    theirs = _acquire(globex.client(), body(), app="globex").json()
    assert theirs["status"] == "created" and theirs["scope_fingerprint"] != fp


def test_no_response_log_metric_or_console_page_shows_a_resource_name_or_the_prefix(
    acme, fake, client, caplog, settings
):
    caplog.set_level("DEBUG")
    api = acme.client()
    texts = []
    for value in (body(), body(), body(scope("bob")), body(prefix_={"system_instruction": "x"})):
        texts.append(_acquire(api, value).content.decode())
    created = _acquire(api, body(scope("carol"))).json()
    fp = created["scope_fingerprint"]
    texts.append(api.get(_url("acme", f"scopes/{fp}")).content.decode())
    texts.append(
        api.post(
            _url("acme", "invalidate"), {"scope_fingerprint": fp}, format="json"
        ).content.decode()
    )
    settings.CTXADMIN_CACHE_FAKE_FAILURE = "provider_rejected"
    texts.append(_acquire(api, body(scope("dave", failure_mode="error"))).content.decode())
    names = [registry.resolve(acme.app, o).resource_name for o in _leases(acme)]
    names += list(fake.resources)
    assert names
    operator = get_user_model().objects.create_superuser("op", password="op-pass-123456")
    client.force_login(operator)
    entry = CacheEntry.objects.filter(state="active").first()
    for page in (
        "/admin/caching/cachescope/",
        f"/admin/caching/cachescope/{entry.scope_id}/change/",
        "/admin/caching/cacheentry/",
        f"/admin/caching/cacheentry/{entry.pk}/change/",
        "/admin/caching/cacheentry/?state=deleting",
    ):
        response = client.get(page)
        assert response.status_code == 200, page
        texts.append(response.content.decode())
    texts.append(client.get("/metrics").content.decode())
    registry.cleanup()
    texts.extend(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    everything = "\n".join(texts)
    assert "ctxadmin_cache_acquires_total" in everything
    assert PREFIX_MARKER not in everything
    for name in names:
        assert name not in everything
        assert name.split("/")[-1] not in everything


def _leases(tenant):
    outcomes = [
        registry.acquire(tenant.app, registry.parse_acquire(body(scope(user)), tenant.app))
        for user in ("alice", "bob")
    ]
    return [o.lease for o in outcomes]


def test_the_console_invalidates_scopes_for_operators_with_the_permission(acme, client, fake):
    _acquire(acme.client(), body())
    scope_row = CacheEntry.objects.get().scope
    User = get_user_model()
    viewer = User.objects.create_user("viewer", password="viewer-pass-1", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_cachescope"))
    client.force_login(viewer)
    page = client.get("/admin/caching/cachescope/")
    assert page.status_code == 200 and "invalidate_scopes" not in page.content.decode()
    viewer.user_permissions.add(Permission.objects.get(codename="invalidate_cachescope"))
    viewer = User.objects.get(pk=viewer.pk)
    client.force_login(viewer)
    answer = client.post(
        "/admin/caching/cachescope/",
        {"action": "invalidate_scopes", "_selected_action": [scope_row.pk]},
        follow=True,
    )
    assert "1 scope(s) invalidated; 1 entries to delete." in answer.content.decode()
    scope_row.refresh_from_db()
    assert scope_row.generation == 2
