"""A 404 says what was not found, from what the caller sent and its own credential alone:
a mistyped app, another user, a missing session or memory, a trailing slash, another API
version. Another tenant's object reads exactly like a missing one."""

from __future__ import annotations

import uuid

import pytest

from sessions_app import user_tokens
from tests.conftest import make_tenant

pytestmark = pytest.mark.django_db


def _error(answer) -> dict:
    assert answer.status_code == 404, answer.content
    return answer.json()["error"]


def test_a_mistyped_app_is_named_with_the_keys_own_app(owner):
    error = _error(owner.client().get("/api/v1/apps/acmee/users/alice/sessions"))
    assert error["message"] == (
        "App 'acmee' was not found: this credential belongs to the app 'acme'."
    )
    assert error["details"] == {"kind": "app", "id": "acmee"}


def test_another_apps_name_reads_like_a_missing_one(owner):
    make_tenant("globex")
    other = _error(owner.client().get("/api/v1/apps/globex/users/alice/sessions"))
    missing = _error(owner.client().get("/api/v1/apps/globez/users/alice/sessions"))
    assert other["message"].replace("globex", "X") == missing["message"].replace("globez", "X")


def test_a_missing_session_is_named_with_its_user(owner):
    error = _error(owner.client().get("/api/v1/apps/acme/users/alice/sessions/trip-9"))
    assert error["message"] == "Session 'trip-9' of user 'alice' was not found."
    assert error["details"] == {"kind": "session", "id": "trip-9"}
    appended = owner.client().post(
        "/api/v1/apps/acme/users/alice/sessions/trip-9/events",
        {"events": [{"author": "user"}]},
        format="json",
    )
    assert _error(appended)["details"] == {"kind": "session", "id": "trip-9"}


def test_a_missing_memory_and_job_are_named(owner):
    memory = str(uuid.uuid4())
    error = _error(owner.client().get(f"/api/v1/apps/acme/users/alice/memories/{memory}"))
    assert error["message"] == f"Memory '{memory}' of user 'alice' was not found."
    error = _error(owner.client().get("/api/v1/apps/acme/outbox/jobs/not-a-job"))
    assert error["details"] == {"kind": "outbox job", "id": "not-a-job"}


def test_a_token_is_told_it_reaches_its_own_user_only(owner):
    _row, raw = user_tokens.mint(
        owner.app, "alice", {"capabilities": ["memory_search"]}, owner.app.api_keys.first()
    )
    client = owner.client(raw)
    error = _error(client.post("/api/v1/apps/acme/users/bob/memories/search", {"query": "x"}))
    assert error["message"] == "User 'bob' for this token (it reaches its own user) was not found."


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        (
            "/api/v1/apps/acme/users/alice/sessions/",
            "did you mean '/api/v1/apps/acme/users/alice/sessions'?",
        ),
        ("/api/v2/apps/acme/", "the API is under /api/v1/"),
        ("/api/v1/nothing-here", "(see /api/docs/)"),
    ],
)
def test_an_unknown_path_is_named_with_the_likely_slip(owner, path, hint):
    error = _error(owner.client().get(path))
    assert error["message"].startswith(f"No endpoint at '{path}'")
    assert hint in error["message"]
