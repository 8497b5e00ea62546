"""Erasing a user ends what the user reaches without a session: their user and tool tokens
answer 401 ``token_ended`` (reason ``erased``), their ``user:`` state and ``user:`` artifacts
are gone, and the receipt counts each; their sessions stay (deleted one by one). Writes of
those already in flight when the erasure starts commit first and are erased with the rest."""

from __future__ import annotations

import base64

import pytest

from memory import erasure
from sessions_app import services, user_tokens
from sessions_app.artifacts import services as artifacts
from sessions_app.artifacts.models import ArtifactHead
from sessions_app.models import ToolToken, UserState
from tests.concurrency_helpers import waits_for_the_holder
from tests.conftest import make_tenant
from tests.ctxadmin.test_api_base import assert_envelope
from tests.sessions_app.test_tool_tokens import _as, _call, _mint

pytestmark = pytest.mark.django_db(transaction=True)

IDENTITY = "/api/v1/apps/acme/tool-token"


def users(user: str) -> str:
    return f"/api/v1/apps/acme/users/{user}"


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    from memory.tasks import drain_outbox
    from sessions_app.tasks import run_compaction

    for task in (drain_outbox, run_compaction):
        monkeypatch.setattr(task, "delay_on_commit", lambda *a, **k: None)


def _reach(tenant, user: str) -> dict:
    """A session holding a ``user:`` key, a ``user:`` artifact and a user token."""
    api = tenant.client()
    created = api.post(
        f"{users(user)}/sessions",
        {"session_id": "s1", "state": {"user:tier": "gold", "user:seat": "aisle", "k": 1}},
        format="json",
    )
    assert created.status_code == 201, created.content
    saved = api.post(
        f"{users(user)}/sessions/s1/artifacts/user:profile.json",
        {"data_base64": base64.b64encode(b"{}").decode(), "mime_type": "application/json"},
        format="json",
    )
    assert saved.status_code == 201, saved.content
    minted = api.post(f"{users(user)}/tokens", {"capabilities": ["state_read"]}, format="json")
    assert minted.status_code == 201, minted.content
    return minted.json()


def _erase(tenant, user: str):
    return tenant.client().delete(
        f"{users(user)}/memories", {"confirm": f"erase user {user}"}, format="json"
    )


def test_erasing_a_user_ends_their_tokens_state_and_user_artifacts_and_nobody_elses():
    acme = make_tenant("acme")
    alice, bob = _reach(acme, "alice"), _reach(acme, "bob")
    _call(acme)
    tool = _mint(acme, ["memory_search"]).json()
    assert _as(tool["token"]).get(IDENTITY).status_code == 200

    erased = _erase(acme, "alice")
    assert erased.status_code == 200, erased.content
    counts = erased.json()["counts"]
    assert counts["tokens_revoked"] == 2
    assert counts["user_state_keys"] == 2
    assert counts["user_artifacts"] == 1
    assert erased.json()["erasure_epoch"] == 1

    for token in (alice, tool):
        error = assert_envelope(_as(token["token"]).get(IDENTITY), 401, "token_ended")
        assert error["details"]["reason"] == "erased"
        assert "its user was erased at" in error["message"]
    api = acme.client()
    state = api.get(f"{users('alice')}/state").json()["state"]
    assert not any(key.startswith("user:") for key in state)
    assert api.get(f"{users('alice')}/sessions/s1/artifacts/user:profile.json").status_code == 404
    # The session stays, with its own keys (sessions are deleted one by one).
    session = api.get(f"{users('alice')}/sessions/s1").json()
    assert session["state"] == {"k": 1}

    # Bob keeps everything.
    assert _as(bob["token"]).get(IDENTITY).status_code == 200
    assert api.get(f"{users('bob')}/state").json()["state"]["user:tier"] == "gold"
    assert api.get(f"{users('bob')}/sessions/s1/artifacts/user:profile.json").status_code == 200

    # A retry finds nothing more: zero counts, the epoch unchanged.
    again = _erase(acme, "alice").json()
    assert set(again["counts"].values()) == {0} and again["erasure_epoch"] == 1


def _write_state(tenant, key):
    services.create_session(tenant.app, "alice", "s1", {"user:tier": "gold"})


def _write_state_on_append(tenant, key):
    services.append_events(
        tenant.app,
        "alice",
        "s0",
        [{"author": "user", "actions": {"state_delta": {"user:tier": "gold"}}}],
    )


def _save_artifact(tenant, key):
    artifacts.save_artifact(tenant.app, "alice", "s1", "user:a.txt", b"x", "text/plain")


def _mint_token(tenant, key):
    user_tokens.mint(tenant.app, "alice", {"capabilities": ["state_read"]}, key)


@pytest.mark.parametrize(
    ("write", "count"),
    [
        (_write_state, "user_state_keys"),
        (_write_state_on_append, "user_state_keys"),
        (_save_artifact, "user_artifacts"),
        (_mint_token, "tokens_revoked"),
    ],
)
def test_a_write_in_flight_when_the_erasure_starts_does_not_survive_it(write, count):
    """A transaction that writes ``user:`` state, a ``user:`` artifact or a token holds the
    user's lock shared; the erasure waits for it to commit, then erases what it wrote
    (without the lock the erasure would not see the uncommitted row, and it would stay)."""
    acme = make_tenant("acme")
    key = acme.app.api_keys.get()
    services.create_session(acme.app, "alice", "s0", {})
    _written, receipt = waits_for_the_holder(
        lambda: write(acme, key), lambda: erasure.erase_user(acme.app, "alice", "test")
    )
    assert receipt["counts"][count] == 1
    assert not UserState.objects.filter(user_id="alice").exists()
    assert not ArtifactHead.objects.filter(user_id="alice", session__isnull=True).exists()
    assert not ToolToken.objects.filter(user_id="alice", revoked_at__isnull=True).exists()
