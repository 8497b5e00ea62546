from __future__ import annotations

import pytest
from django.test import override_settings

from ctxadmin.stack import free_port


def test_the_root_says_where_things_are(client):
    response = client.get("/")
    assert response.status_code == 200
    index = response.json()
    assert index["docs"] == "/api/docs/" and index["api"] == "/api/v1/"
    for path in (index["docs"], index["health"], index["schema"]):
        assert client.get(path).status_code == 200, path


def test_healthz(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_reports_each_dependency(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "pgvector", "migrations", "redis"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["pgvector"]["detail"].startswith("vector ")


@pytest.mark.django_db
def test_readyz_is_503_naming_redis_when_the_broker_is_down(client):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with override_settings(CELERY_BROKER_URL=dead):
        response = client.get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["ok"] is False
    assert checks["database"]["ok"] is True
    assert "127.0.0.1" not in response.content.decode()


@pytest.mark.django_db
def test_metrics_are_counts_only(client, owner):
    owner.client().get(f"/api/v1/apps/{owner.app.name}/")
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    assert "ctxadmin_apps 1.0" in text
    assert 'ctxadmin_api_keys{state="active"} 1.0' in text
    assert (
        'ctxadmin_http_requests_total{method="GET",route="api/v1/apps/<str:app>/",status="2xx"}'
        in text
    )
    assert "ctxadmin_database_up 1.0" in text
    assert owner.key not in text
    assert "acme" not in text


@pytest.mark.django_db
def test_metrics_token_when_configured(client):
    with override_settings(CTXADMIN_METRICS_TOKEN="scrape-me"):
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-me").status_code == 200
