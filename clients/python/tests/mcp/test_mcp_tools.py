"""``/mcp`` on the live stack, through the official MCP Python client (the SDK's streamable
HTTP client): initialise, list the tools, call every one of them, and be refused as a
stranger."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

ALL_TOOLS = {
    "memory_search",
    "memory_add",
    "memory_get",
    "memory_history",
    "memory_rollback",
    "memory_delete",
    "memory_forget_user",
    "context_build",
    "session_list",
    "session_events",
    "session_create",
    "event_append",
    "ingestion_status",
}


def mcp_url(app) -> str:
    return f"{app.base_url}/mcp"


async def _session_run(url: str, credential: str, work) -> Any:
    headers = {"Authorization": f"Bearer {credential}"}
    async with streamablehttp_client(url, headers=headers) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


def run(app, credential: str, work) -> Any:
    return asyncio.run(_session_run(mcp_url(app), credential, work))


def structured(result) -> dict:
    return result.structuredContent or json.loads(result.content[0].text)


def test_an_api_key_with_every_scope_lists_and_calls_every_tool(make_app):
    app = make_app()
    user, other_session = f"u-{uuid.uuid4().hex[:8]}", "s-two"

    async def work(session: ClientSession) -> dict:
        listed = await session.list_tools()
        names = {tool.name for tool in listed.tools}
        for tool in listed.tools:
            assert tool.inputSchema["additionalProperties"] is False
            assert tool.description
        answers = {"names": names}

        async def call(name: str, **arguments: Any) -> dict:
            result = await session.call_tool(name, arguments)
            body = structured(result)
            answers[name] = (result.isError, body)
            return body

        await call("session_create", user_id=user, session_id="s-one", state={"step": 1})
        await call(
            "event_append",
            user_id=user,
            session_id="s-one",
            event={"author": "user", "content": {"role": "user", "parts": [{"text": "hello"}]}},
        )
        added = await call(
            "memory_add",
            user_id=user,
            content="The user's favourite colour is teal.",
            idempotency_key="colour",
        )
        memory_id = added["memory"]["id"]
        await call("memory_search", user_id=user, query="favourite colour", mode="lexical")
        await call("memory_get", user_id=user, memory_id=memory_id)
        await call("memory_history", user_id=user, memory_id=memory_id)
        await call("memory_rollback", user_id=user, memory_id=memory_id)
        await call("context_build", user_id=user, session_id="s-one", query="what colour?")
        await call("session_list", user_id=user)
        await call("session_events", user_id=user, session_id="s-one", limit=1)
        await call("ingestion_status", job_id=str(uuid.uuid4()))
        await call("memory_delete", user_id=user, memory_id=memory_id)
        await call("memory_add", user_id=user, content="another fact", metadata={"k": "v"})
        await call("memory_forget_user", user_id=user, confirm="wrong phrase")
        await call("memory_forget_user", user_id=user, confirm=f"erase user {user}")
        await call("session_events", user_id=user, session_id=other_session)
        answers["memory_id"] = memory_id
        return answers

    answers = run(app, app.key, work)
    memory_id = answers.pop("memory_id")
    assert answers.pop("names") == ALL_TOOLS
    # The rollback of a memory without a key is refused (409 memory_not_keyed).
    expected_errors = {"session_events", "ingestion_status", "memory_rollback"}
    assert {name for name, (error, _) in answers.items() if error} == expected_errors
    assert not any(
        v[0]
        for k, v in answers.items()
        if k
        not in {
            "names",
            "session_events",
            "ingestion_status",
            "memory_forget_user",
            "memory_rollback",
        }
    ), {k: v for k, v in answers.items() if k != "names" and v[0]}
    assert answers["session_create"][1]["state"] == {"step": 1}
    assert answers["event_append"][0] is False and answers["event_append"][1]["revision"] == 1
    assert answers["memory_add"][0] is False
    error, found = answers["memory_search"]
    assert not error and "untrusted" in found["note"]
    assert [hit["content"] for hit in found["hits"]] == ["The user's favourite colour is teal."]
    assert answers["memory_get"][1]["memory"]["content"] == "The user's favourite colour is teal."
    history = answers["memory_history"][1]
    assert [v["id"] for v in history["versions"]] == [memory_id] and "untrusted" in history["note"]
    assert answers["memory_rollback"][1]["error"]["code"] == "memory_not_keyed"
    error, context = answers["context_build"]
    assert not error and "envelope" in context and "accounting" in context
    assert [row["session_id"] for row in answers["session_list"][1]["sessions"]] == ["s-one"]
    assert answers["session_events"][1]["error"]["code"] == "not_found"  # the unknown session
    assert answers["ingestion_status"][1]["error"]["code"] == "not_found"
    assert answers["memory_delete"] == (False, {"deleted": memory_id})
    error, receipt = answers["memory_forget_user"]
    assert not error and receipt["receipt"]


def test_events_page_and_the_wrong_confirmation_is_refused(make_app):
    app = make_app()
    user = "pager"

    async def work(session: ClientSession) -> list:
        await session.call_tool("session_create", {"user_id": user, "session_id": "s"})
        for text in ("one", "two", "three"):
            await session.call_tool(
                "event_append",
                {
                    "user_id": user,
                    "session_id": "s",
                    "event": {
                        "author": "user",
                        "content": {"role": "user", "parts": [{"text": text}]},
                    },
                },
            )
        first = structured(
            await session.call_tool(
                "session_events", {"user_id": user, "session_id": "s", "limit": 2}
            )
        )
        second = structured(
            await session.call_tool(
                "session_events",
                {"user_id": user, "session_id": "s", "after_seq": first["next_after_seq"]},
            )
        )
        wrong = await session.call_tool(
            "memory_forget_user", {"user_id": user, "confirm": "erase user someone-else"}
        )
        return [first, second, wrong]

    first, second, wrong = run(app, app.key, work)
    texts = [e["content"]["parts"][0]["text"] for e in first["events"] + second["events"]]
    assert texts == ["one", "two", "three"]
    assert second["next_after_seq"] is None
    assert wrong.isError and structured(wrong)["error"]["details"]["field"] == "confirm"


def test_a_key_sees_only_the_tools_of_its_scopes(make_app):
    app = make_app(scopes=("memory",))

    async def work(session: ClientSession):
        names = {tool.name for tool in (await session.list_tools()).tools}
        refused = await session.call_tool("session_list", {"user_id": "u"})
        return names, refused

    names, refused = run(app, app.key, work)
    assert names == {n for n in ALL_TOOLS if n.startswith(("memory_", "ingestion"))}
    assert refused.isError and structured(refused)["error"]["code"] == "unknown_tool"


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("credential", [None, "ctx_notakey", "ctt_0123456789_" + "x" * 43])
def test_no_or_a_wrong_credential_is_a_401_before_any_message(make_app, credential):
    app = make_app()
    headers = dict(ACCEPT)
    if credential:
        headers["Authorization"] = f"Bearer {credential}"
    answer = httpx.post(mcp_url(app), json=INITIALIZE, headers=headers)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "not_authenticated"
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_key_is_refused_and_another_apps_key_sees_nothing_of_this_app(make_app, make_key):
    app, other = make_app(), make_app()
    spare = make_key(app.name, ["memory"])
    prefix = spare.split("_")[1]
    revoked = httpx.delete(
        f"{app.base_url}/api/v1/apps/{app.name}/keys/{prefix}",
        headers={"Authorization": f"Bearer {app.key}"},
    )
    assert revoked.status_code == 204
    answer = httpx.post(
        mcp_url(app), json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {spare}"}
    )
    assert answer.status_code == 401

    async def store(session):
        return await session.call_tool("memory_add", {"user_id": "shared", "content": "mine"})

    async def look(session):
        return await session.call_tool("memory_search", {"user_id": "shared", "query": "mine"})

    run(app, app.key, store)
    assert structured(run(other, other.key, look))["hits"] == []


def test_an_oversized_request_is_refused(make_app):
    app = make_app()
    answer = httpx.post(
        mcp_url(app),
        content=b" " * (2 * 1024 * 1024),
        headers={
            **ACCEPT,
            "Authorization": f"Bearer {app.key}",
            "Content-Type": "application/json",
        },
    )
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "request_too_large"


def test_a_chunked_request_is_read_and_bounded(make_app):
    app = make_app()
    headers = {**ACCEPT, "Authorization": f"Bearer {app.key}", "Content-Type": "application/json"}
    message = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode()

    def chunks(body: bytes, size: int = 7):
        for start in range(0, len(body), size):
            yield body[start : start + size]

    # No Content-Length: the body arrives in chunks and is read whole.
    listed = httpx.post(mcp_url(app), content=chunks(message), headers=headers)
    assert listed.status_code == 200, listed.text
    assert "memory_search" in {tool["name"] for tool in listed.json()["result"]["tools"]}

    oversized = httpx.post(
        mcp_url(app), content=chunks(b" " * (2 * 1024 * 1024), 64 * 1024), headers=headers
    )
    assert oversized.status_code == 413
    assert oversized.json()["error"]["code"] == "request_too_large"


def test_a_get_opens_no_stream_and_holds_no_thread(make_app):
    app = make_app()
    answer = httpx.get(
        mcp_url(app),
        headers={"Accept": "text/event-stream", "Authorization": f"Bearer {app.key}"},
        timeout=10,
    )
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "POST, DELETE"
    assert answer.json()["error"]["code"] == "method_not_allowed"
    # Without a credential it is still a 401 first.
    assert httpx.get(mcp_url(app), headers={"Accept": "text/event-stream"}).status_code == 401


def test_a_memory_search_user_token_lists_and_calls_only_memory_search(make_app):
    from ctxadmin_client import Client

    app = make_app(scopes=("memory", "delegate"))
    with Client(app.base_url, api_key=app.key) as client:
        client.add_memory(app.name, "alice", content="Alice keeps bees.")
        minted = client.mint_user_token(
            app.name, "alice", capabilities=["memory_search"], label="one agent run"
        )
        listed = list(client.list_user_tokens(app.name, "alice"))
    assert minted["user_id"] == "alice" and minted["session_id"] is None
    assert [t["prefix"] for t in listed] == [minted["prefix"]]
    assert "token" not in listed[0]

    async def work(session: ClientSession):
        names = {tool.name for tool in (await session.list_tools()).tools}
        own = await session.call_tool("memory_search", {"query": "bees", "mode": "lexical"})
        named = await session.call_tool(
            "memory_search", {"user_id": "alice", "query": "bees", "mode": "lexical"}
        )
        other = await session.call_tool("memory_search", {"user_id": "bob", "query": "bees"})
        add = await session.call_tool("memory_add", {"content": "x"})
        return names, own, named, other, add

    names, own, named, other, add = run(app, minted["token"], work)
    # memory_search reads memory: a search, and a memory's history (as over REST).
    assert names == {"memory_search", "memory_history"}
    assert [h["content"] for h in structured(own)["hits"]] == ["Alice keeps bees."]
    assert structured(named)["hits"] == structured(own)["hits"]
    assert other.isError and structured(other)["error"]["code"] == "not_found"
    assert add.isError and structured(add)["error"]["code"] == "unknown_tool"

    with Client(app.base_url, api_key=app.key) as client:
        client.revoke_user_token(app.name, "alice", minted["prefix"])
        assert client.get_user_token(app.name, "alice", minted["prefix"])["state"] == "revoked"
    answer = httpx.post(
        mcp_url(app),
        json=INITIALIZE,
        headers={**ACCEPT, "Authorization": f"Bearer {minted['token']}"},
    )
    assert answer.status_code == 401


def test_minting_needs_the_admin_or_delegate_scope_and_a_token_cannot_mint(make_app):
    app = make_app(scopes=("memory",))
    url = f"{app.base_url}/api/v1/apps/{app.name}/users/alice/tokens"
    answer = httpx.post(
        url,
        json={"capabilities": ["memory_search"]},
        headers={"Authorization": f"Bearer {app.key}"},
    )
    assert answer.status_code == 403
    admin_only = make_app(scopes=("admin",))
    beyond = httpx.post(
        f"{admin_only.base_url}/api/v1/apps/{admin_only.name}/users/alice/tokens",
        json={"capabilities": ["memory_search"]},
        headers={"Authorization": f"Bearer {admin_only.key}"},
    )
    # A token carries no capability its minting key's scopes do not cover.
    assert beyond.status_code == 403
    assert beyond.json()["error"]["code"] == "capability_beyond_minter"
    admin = make_app(scopes=("admin", "memory"))
    admin_url = f"{admin.base_url}/api/v1/apps/{admin.name}/users/alice/tokens"
    minted = httpx.post(
        admin_url,
        json={"capabilities": ["memory_search"], "ttl_ms": 60_000},
        headers={"Authorization": f"Bearer {admin.key}"},
    )
    assert minted.status_code == 201
    again = httpx.post(
        admin_url,
        json={"capabilities": ["memory_search"]},
        headers={"Authorization": f"Bearer {minted.json()['token']}"},
    )
    assert again.status_code == 403
    unknown = httpx.post(
        admin_url,
        json={"capabilities": ["memory_search"], "extra": 1},
        headers={"Authorization": f"Bearer {admin.key}"},
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "validation_error"


def test_facts_over_time_through_the_sdk_client(make_app):
    """A keyed add supersedes, search reads at a valid time and a record time, the history
    names both versions and who wrote them, and a rollback restores the old value; a
    token with memory_add alone may not roll back (it ends the live version)."""
    from ctxadmin_client import Client

    app = make_app(scopes=("memory", "delegate"))
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def work(session: ClientSession) -> dict:
        async def call(name: str, **arguments: Any):
            result = await session.call_tool(name, arguments)
            return result.isError, structured(result)

        seat = {"user_id": user, "key": "Preference.Seat"}
        _, aisle = await call(
            "memory_add", **seat, content="aisle seat", valid_from="2026-01-01T00:00:00Z"
        )
        _, window = await call(
            "memory_add", **seat, content="window seat", valid_from="2026-06-01T00:00:00Z"
        )
        query = {"user_id": user, "query": "seat", "mode": "lexical"}
        return {
            "aisle": aisle["memory"],
            "window": window["memory"],
            "now": await call("memory_search", **query),
            "march": await call("memory_search", **query, as_of="2026-03-01T00:00:00Z"),
            # As known when aisle was recorded (before window was), aisle was current.
            "known_then": await call(
                "memory_search", **query, known_at=aisle["memory"]["recorded_at"]
            ),
            "bad_key": await call("memory_add", user_id=user, content="x", key="no spaces"),
            "bad_instant": await call("memory_search", **query, as_of="last week"),
            "history": await call("memory_history", user_id=user, memory_id=window["memory"]["id"]),
        }

    answers = run(app, app.key, work)
    aisle, window = answers["aisle"], answers["window"]
    assert aisle["key"] == window["key"] == "preference.seat"
    assert window["supersedes"] == aisle["id"]
    assert [hit["content"] for hit in answers["now"][1]["hits"]] == ["window seat"]
    assert [hit["content"] for hit in answers["march"][1]["hits"]] == ["aisle seat"]
    assert [hit["content"] for hit in answers["known_then"][1]["hits"]] == ["aisle seat"]
    assert answers["bad_key"][0] and answers["bad_key"][1]["error"]["details"]["field"] == "key"
    assert answers["bad_instant"][0]
    assert answers["bad_instant"][1]["error"]["details"]["field"] == "as_of"
    versions = answers["history"][1]["versions"]
    assert [v["content"] for v in versions] == ["aisle seat", "window seat"]
    assert all(v["written_by"]["key_prefix"] for v in versions)

    with Client(app.base_url, api_key=app.key) as client:
        adder = client.mint_user_token(app.name, user, capabilities=["memory_add"], label="add")
        both = client.mint_user_token(
            app.name, user, capabilities=["memory_add", "memory_delete"], label="both"
        )

    async def rollback(session: ClientSession):
        result = await session.call_tool("memory_rollback", {"memory_id": aisle["id"]})
        return result.isError, structured(result)

    # A token with memory_add alone neither lists nor may call the rollback.
    refused = run(app, adder["token"], rollback)
    assert refused[0] and refused[1]["error"]["code"] == "unknown_tool"
    error, restored = run(app, both["token"], rollback)
    assert not error and restored["created"] is True
    assert restored["memory"]["content"] == "aisle seat" and restored["memory"]["valid_to"] is None
    assert restored["memory"]["supersedes"] == window["id"]
