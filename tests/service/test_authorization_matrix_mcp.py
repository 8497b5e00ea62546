"""The authorization matrix of ``/mcp``: every tool, called with every credential that must
not get through — none, a revoked key, another app's key, this app's key without the scope,
a user token without the capability, a user token of another user — is refused as
documented (an HTTP 401 before any MCP message, an ``unknown_tool`` tool error for a tool the
credential may not call, ``not_found`` for data that is not its own), never reaches this
app's data and changes nothing of it. ``MCP_MATRIX`` is the documentation; a tool missing
from it fails."""

from __future__ import annotations

import json

import pytest

from ctxadmin.models import SCOPES
from ctxadmin.services import create_api_key, revoke_api_keys
from memory.models import MemoryEntry
from memory.outbox import operations
from runner.mcp import tools as mcp_tools
from sessions_app import user_tokens
from sessions_app.models import Event, Session
from tests.conftest import make_tenant
from tests.outbox_helpers import admit, session_with_events
from tests.service.leaks.mcp_flows import mcp_post

pytestmark = pytest.mark.django_db(transaction=True)

USER, OTHER_USER, SID = "alice", "bob", "s1"
SECRET_WORDS = "alice keeps her spare key under the blue flowerpot"

#: tool -> (the scope an API key needs, the capability a delegated token needs; None: keys only)
MCP_MATRIX: dict[str, tuple[str, str | None]] = {
    "memory_search": ("memory", "memory_search"),
    "memory_add": ("memory", "memory_add"),
    "memory_get": ("memory", "memory_get"),
    "memory_history": ("memory", "memory_search"),
    "memory_rollback": ("memory", "memory_add"),
    "memory_delete": ("memory", "memory_delete"),
    "memory_forget_user": ("memory", None),
    "context_build": ("sessions", "context_build"),
    "session_list": ("sessions", "session_read"),
    "session_events": ("sessions", "session_read"),
    "session_create": ("sessions", "event_append"),
    "event_append": ("sessions", "event_append"),
    "ingestion_status": ("memory", None),
}


def _arguments(world: dict, tool: str) -> dict:
    """Arguments naming this app's user, session, memory and job."""
    return {
        "memory_search": {"user_id": USER, "query": "flowerpot", "mode": "lexical"},
        "memory_add": {"user_id": USER, "content": "an intruder's note"},
        "memory_get": {"user_id": USER, "memory_id": world["memory_id"]},
        "memory_history": {"user_id": USER, "memory_id": world["memory_id"]},
        "memory_rollback": {"user_id": USER, "memory_id": world["memory_id"]},
        "memory_delete": {"user_id": USER, "memory_id": world["memory_id"]},
        "memory_forget_user": {"user_id": USER, "confirm": f"erase user {USER}"},
        "context_build": {"user_id": USER, "session_id": SID, "query": "where is the key?"},
        "session_list": {"user_id": USER},
        "session_events": {"user_id": USER, "session_id": SID},
        "session_create": {"user_id": USER, "session_id": "s-new"},
        "event_append": {
            "user_id": USER,
            "session_id": SID,
            "event": {"author": "user", "content": {"role": "user", "parts": [{"text": "x"}]}},
        },
        "ingestion_status": {"job_id": world["job_id"]},
    }[tool]


def _message(method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


def _call(credential: str | None, tool: str, arguments: dict) -> tuple[int, dict | bytes]:
    status, body = mcp_post(
        credential, _message("tools/call", {"name": tool, "arguments": arguments})
    )
    return status, (json.loads(body) if status == 200 else body)


def _listed(credential: str) -> set[str]:
    status, body = mcp_post(credential, _message("tools/list"))
    assert status == 200, body
    return {tool["name"] for tool in json.loads(body)["result"]["tools"]}


def _snapshot(world: dict) -> tuple:
    """This app's memory written through the API, what an intruder would have written, and
    the session's events (an ingestion worker may add memories meanwhile: not compared)."""
    app = world["owner"].app
    return (
        list(
            MemoryEntry.objects.filter(app=app, pk=world["memory_id"]).values_list(
                "content", "updated_at"
            )
        ),
        MemoryEntry.objects.filter(app=app, content="an intruder's note").count(),
        Event.objects.filter(session__app=app).count(),
        Session.objects.filter(app=app).count(),
    )


@pytest.fixture
def world(settings):
    settings.CTXADMIN_MCP_CALLS_PER_MINUTE = 100_000
    owner = make_tenant("acme")
    outsider = make_tenant("globex")
    client = owner.client()
    session_with_events(client, "acme", USER, SID, 4)
    added = client.post(
        f"/api/v1/apps/acme/users/{USER}/memories", {"content": SECRET_WORDS}, format="json"
    )
    assert added.status_code == 201, added.content
    job = admit(client, "acme", USER, SID).json()
    # Its status is all the matrix reads: cancelled, no worker holds its rows while the
    # test's tables are emptied after it (a worker mid-batch then deadlocks the flush).
    operations.cancel(owner.app, job["job_id"])
    _row, revoked = create_api_key(owner.app, list(SCOPES), name="revoked")
    revoke_api_keys(owner.app.api_keys.filter(name="revoked"))
    return {
        "owner": owner,
        "outsider": outsider,
        "revoked": revoked,
        "memory_id": added.json()["id"],
        "job_id": job["job_id"],
    }


def _user_token(world: dict, user: str, capabilities: list[str]) -> str:
    _row, raw = user_tokens.mint(
        world["owner"].app,
        user,
        {"capabilities": capabilities},
        world["owner"].app.api_keys.get(name="acme owner"),
    )
    return raw


def test_every_tool_is_in_the_matrix():
    found = {tool.name: (tool.scope, tool.capability) for tool in mcp_tools.TOOLS}
    assert found == MCP_MATRIX


def _assert_refused(answer: tuple[int, dict | bytes], code: str) -> None:
    status, body = answer
    assert status == 200, body
    result = body["result"]
    assert result["isError"] is True, result
    assert result["structuredContent"]["error"]["code"] == code, result
    assert SECRET_WORDS not in json.dumps(result)


@pytest.mark.parametrize("tool", sorted(MCP_MATRIX))
def test_no_credential_that_must_not_get_through_does(tool, world):
    scope, capability = MCP_MATRIX[tool]
    arguments = _arguments(world, tool)
    before = _snapshot(world)

    for credential in (None, world["revoked"], "ctx_notakey"):
        status, body = _call(credential, tool, arguments)
        assert status == 401, (credential, body)
        assert json.loads(body)["error"]["code"] == "not_authenticated"

    # Another app's key reaches its own app only: this app's session, memory and job are
    # not found there, and what it writes lands in its own app.
    status, body = _call(world["outsider"].key, tool, arguments)
    assert status == 200 and SECRET_WORDS not in json.dumps(body), body
    if tool in {
        "memory_get",
        "memory_history",
        "memory_rollback",
        "memory_delete",
        "context_build",
        "session_events",
        "ingestion_status",
    }:
        _assert_refused((status, body), "not_found")

    without = [s for s in SCOPES if s != scope]
    _row, key = create_api_key(world["owner"].app, without, name=f"without {scope}")
    assert tool not in _listed(key)
    _assert_refused(_call(key, tool, arguments), "unknown_tool")

    others = [c for c in user_tokens.CAPABILITIES if c != capability]
    token = _user_token(world, USER, others)
    assert tool not in _listed(token)
    _assert_refused(_call(token, tool, arguments), "unknown_tool")

    if capability is not None:
        # A token with the capability (and what else the tool needs: a rollback's delete),
        # but of another user: this user's data is not found.
        token = _user_token(world, OTHER_USER, [capability, *mcp_tools.BY_NAME[tool].also_needs])
        assert tool in _listed(token)
        _assert_refused(_call(token, tool, arguments), "not_found")

    assert _snapshot(world) == before
