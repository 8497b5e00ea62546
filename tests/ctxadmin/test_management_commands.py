from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from ctxadmin.models import ApiKey, App
from ctxadmin.operators import CONTENT_FREE_GROUPS


def run(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_create_app_and_key_then_use_the_key(anonymous):
    run("create_app", "shop", "--display-name", "Shop")
    out, err = run("create_api_key", "--app", "shop", "--scopes", "sessions", "diagnostics")
    raw = out.strip()
    assert raw.startswith("ctx_")
    assert raw not in err  # printed once, on stdout
    key = ApiKey.objects.get()
    assert key.scopes == ["diagnostics", "sessions"]
    response = anonymous.get("/api/v1/apps/shop/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200


@pytest.mark.django_db
def test_create_app_rejects_bad_names():
    with pytest.raises(CommandError, match="1-63 characters from A-Z a-z 0-9 _ -"):
        run("create_app", "bad.name")
    run("create_app", "good")
    with pytest.raises(CommandError, match="already exists"):
        run("create_app", "good")


@pytest.mark.django_db
def test_create_api_key_rejects_unknown_scopes_and_apps():
    App.objects.create(name="shop")
    with pytest.raises(CommandError, match="unknown scope"):
        run("create_api_key", "--app", "shop", "--scopes", "root")
    with pytest.raises(CommandError, match="no app named"):
        run("create_api_key", "--app", "nope", "--scopes", "memory")
    assert not ApiKey.objects.exists()


@pytest.mark.django_db
def test_revoke_api_key(owner):
    key = owner.app.api_keys.get()
    out, _ = run("revoke_api_key", key.prefix)
    assert "revoked" in out
    key.refresh_from_db()
    assert key.revoked_at is not None


@pytest.mark.django_db
def test_bootstrap_demo_only_on_an_empty_database():
    out, _ = run("bootstrap_demo", "--base-url", "http://127.0.0.1:9999")
    assert "password" in out and "ctx_" in out
    assert App.objects.get().name == "demo"
    operator = get_user_model().objects.get()
    assert operator.is_staff and not operator.is_superuser
    assert sorted(operator.groups.values_list("name", flat=True)) == sorted(CONTENT_FREE_GROUPS)
    # The first account sees no conversation content until someone grants it.
    assert not operator.has_perm("ctxadmin.view_content")
    assert operator.has_perm("ctxadmin.add_apikey")
    assert "grant_content operator" in out
    again, _ = run("bootstrap_demo")
    assert "ctx_" not in again
    assert ApiKey.objects.count() == 1


@pytest.mark.django_db
def test_content_access_is_granted_and_revoked_deliberately():
    run("bootstrap_demo")
    out, _ = run("grant_content", "operator")
    assert "operator may see conversation content" in out
    assert get_user_model().objects.get(username="operator").has_perm("ctxadmin.view_content")
    out, _ = run("grant_content", "operator", "--revoke")
    assert "operator may not see conversation content" in out
    assert not get_user_model().objects.get(username="operator").has_perm("ctxadmin.view_content")
    with pytest.raises(CommandError, match="no operator named 'nobody'"):
        run("grant_content", "nobody")


@pytest.mark.django_db(transaction=True)
def test_probe_workers_reports_the_round_trip(celery_worker_process):
    out, _ = run("probe_workers", "--timeout", "30")
    assert "completed by" in out


@pytest.mark.django_db
def test_create_operator_makes_a_staff_account_in_the_groups_named():
    out, _ = run("create_operator", "dana", "--group", "diagnostics viewer")
    assert "created operator dana in diagnostics viewer" in out
    dana = get_user_model().objects.get(username="dana")
    assert dana.is_staff and not dana.is_superuser
    assert not dana.has_perm("ctxadmin.view_content")
    password = out.split("password: ")[1].strip()
    assert dana.check_password(password)
    with pytest.raises(CommandError, match="exists"):
        run("create_operator", "dana", "--group", "content viewer")
    with pytest.raises(CommandError):
        run("create_operator", "erin", "--group", "root")
