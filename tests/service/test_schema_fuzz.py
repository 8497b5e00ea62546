"""Schemathesis against the committed OpenAPI schema (docs/openapi.yaml): every operation,
seeded and bounded, called in process through Django with a key holding every scope.

Each answer must be no 5xx; a status, content type and body the schema documents; every
error (4xx) the one envelope ``{"error": {"code", "message", "details"}}``; a request the
schema forbids refused with a 4xx; an undocumented method a 405.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from sessions_app.services import create_session
from tests.conftest import make_tenant

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
# The tenant's app, and a session that exists in it: fuzzed requests reach the views, not a 404.
APP, USER, SID = "fuzz", "alice", "s1"

schema = schemathesis.openapi.from_path(SCHEMA_PATH)
schema.app = get_wsgi_application()
schema.config.seed = 20260601
# Bounded: the coverage phase's deterministic cases plus this many generated ones per operation.
schema.config.generation.update(max_examples=5, deterministic=True)
schema.config.update(parameters={"path.app": APP, "path.user": USER, "path.sid": SID})
# A body over CTXADMIN_MAX_BODY_BYTES is refused with 413 before anything reads it.
schema.config.checks.negative_data_rejection.expected_statuses = [
    *schema.config.checks.negative_data_rejection.expected_statuses,
    "413",
]
# Failure reports show the real request (the key is a throwaway of the test database).
schema.config.output.sanitization.update(enabled=False)

# The tenant's key, fixed: some cases are built when the tests are collected, before the
# tenant exists (the fixture below gives its key this value).
KEY_PREFIX = "fuzz000000"
KEY = f"ctx_{KEY_PREFIX}_{'k' * 43}"


@schema.auth(refresh_interval=None)
class TenantKey:
    """The tenant's key on every case, except those that test a missing Authorization."""

    def get(self, case, context):
        return KEY

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


def error_envelope(ctx, response, case):
    """Every 4xx is ``{"error": {"code": str, "message": str, "details": object}}``."""
    if response.status_code < 400:
        return None
    try:
        error = response.json()["error"]
        shaped = (
            isinstance(error["code"], str)
            and error["code"]
            and isinstance(error["message"], str)
            and error["message"]
            and isinstance(error["details"], dict)
        )
    except (ValueError, TypeError, KeyError):
        shaped = False
    assert shaped, f"not in the error envelope: [{response.status_code}] {response.content[:300]!r}"
    return None


def excluded_checks(case) -> list:
    # A schema-valid request may still be refused by design: the schema cannot express
    # configured names (provider connections), cross-field rules (TTL against retention) or
    # state (nothing to compact). The refusal is still checked to be a 4xx in the envelope.
    excluded = [positive_data_acceptance]
    saves_raw = case.method == "POST" and case.operation.path.endswith("/artifacts/{name}")
    if saves_raw and (case.query or {}).get("format") == "raw":
        # With ?format=raw the body is the artifact's bytes whatever its Content-Type: the
        # JSON body schema does not apply, so no body is "schema-violating".
        excluded.append(negative_data_rejection)
    return excluded


@pytest.fixture
def tenant(db, monkeypatch):
    # Django closes "old" connections when a request starts and ends; inside the test's
    # transaction that would end it, so the in-process calls leave the connection alone
    # (as Django's own test client does).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        # The tenant's own key is a known one; keys the API makes draw real ones.
        with monkeypatch.context() as patched:
            patched.setattr("ctxadmin.services.generate_key", lambda: (KEY_PREFIX, KEY))
            tenant = make_tenant(APP)
        create_session(tenant.app, USER, SID, {})
        yield tenant
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
# The tenant and its session are made once per operation; its examples share them.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_operation(case, tenant):
    case.call_and_validate(
        additional_checks=[error_envelope], excluded_checks=excluded_checks(case)
    )


# What this run found once, pinned whatever the seed draws: each answers a 4xx in the
# envelope (405 for a method the endpoint does not have), never a 5xx or a 2xx.
BASE = f"/api/v1/apps/{APP}"
SESSION = f"{BASE}/users/{USER}/sessions/{SID}"
EVENT = {"author": "user", "event_id": "e1"}
FOUND = [
    ("options", f"{BASE}/compaction-policy", None, 405),
    ("trace", f"{SESSION}/artifacts/n?format=json&version=0", None, 405),
    ("patch", f"{BASE}/", {"display_name": 0}, 400),
    ("post", f"{BASE}/users/{USER}/memories", {"content": "x", "provenance": False}, 400),
    ("post", f"{SESSION}/events", {"event": {**EVENT, "actions": 0}}, 400),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), FOUND)
def test_a_found_case_stays_refused(method, path, body, status, tenant):
    client = tenant.client()
    if method == "trace":  # the test client has no trace(); generic() sends any method
        answer = client.generic("TRACE", path)
    else:
        answer = getattr(client, method)(path, body, format="json")
    assert answer.status_code == status, answer.content[:300]
    error = answer.json()["error"]
    assert error["code"] and error["message"] and isinstance(error["details"], dict)


def test_null_is_absent_where_the_schema_says_nullable(tenant):
    client = tenant.client()
    provenance = {"session_id": None, "event_id": None, "author": None}
    memory = client.post(
        f"{BASE}/users/{USER}/memories",
        {"content": "x", "provenance": provenance, "erasure_epoch": None},
        format="json",
    )
    assert memory.status_code == 201, memory.content[:300]
    event = {**EVENT, "actions": None, "timestamp": None, "invocation_id": None}
    appended = client.post(
        f"{SESSION}/events", {"event": event, "expected_revision": None}, format="json"
    )
    assert appended.status_code == 201, appended.content[:300]
