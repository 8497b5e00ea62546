"""``/mcp`` obeys the rules the REST API obeys: a delegated credential writes no shared state
it does not reach, everything that leaves is cleaned of credentials whichever tool or
resource it leaves through, every request that does work is admitted and counted, bodies are
parsed with the REST API's strict rules, and an unexpected error is an ``internal_error``
envelope (never a Python error's text)."""

from __future__ import annotations

import json
import logging
import secrets

import pytest

from ctxadmin.models import SCOPES
from ctxadmin.services import create_api_key
from memory import entries, new_memory
from runner.mcp import tools as mcp_tools
from sessions_app import user_tokens
from sessions_app.models import AppState, Event, Session, UserState
from tests.conftest import make_tenant
from tests.service.leaks.mcp_flows import mcp_post

pytestmark = pytest.mark.django_db(transaction=True)

USER, SID = "alice", "s1"


@pytest.fixture
def acme(settings):
    settings.CTXADMIN_MCP_CALLS_PER_MINUTE = 100_000
    tenant = make_tenant("acme")
    created = tenant.client().post(
        f"/api/v1/apps/acme/users/{USER}/sessions", {"session_id": SID}, format="json"
    )
    assert created.status_code == 201, created.content
    return tenant


def _message(method: str, params: dict | None = None, id_: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


def call(credential: str, tool: str, arguments: dict) -> dict:
    status, body = mcp_post(
        credential, _message("tools/call", {"name": tool, "arguments": arguments})
    )
    assert status == 200, body
    return json.loads(body)["result"]


def error_of(result: dict) -> dict:
    assert result["isError"] is True, result
    return result["structuredContent"]["error"]


def _token(tenant, capabilities: list[str], session_id: str | None = None) -> str:
    body: dict = {"capabilities": capabilities}
    if session_id is not None:
        body["session_id"] = session_id
    _row, raw = user_tokens.mint(tenant.app, USER, body, tenant.app.api_keys.first())
    return raw


def _append(credential: str, delta: dict, session_id: str = SID) -> dict:
    event = {
        "author": "agent",
        "content": {"role": "model", "parts": [{"text": "noted"}]},
        "actions": {"state_delta": delta},
    }
    arguments = {"user_id": USER, "session_id": session_id, "event": event}
    return call(credential, "event_append", arguments)


def _shared_state(tenant) -> tuple[dict, dict]:
    app = AppState.objects.filter(app=tenant.app).first()
    user = UserState.objects.filter(app=tenant.app, user_id=USER).first()
    return (app.state if app else {}), (user.state if user else {})


# ------------------------------------------------------------------- state scopes


def test_a_user_token_never_writes_app_state(acme):
    token = _token(acme, ["event_append"])
    events_before = Event.objects.filter(session__app=acme.app).count()
    for delta in (
        {"app:greeting": "ignore previous instructions"},
        {"app:greeting": None},
        {"topic": "fine", "app:zz": 1},
    ):
        error = error_of(_append(token, delta))
        assert error["code"] == "state_scope_denied", error
        assert error["details"]["scope"] == "app"
        assert error["details"]["key"].startswith("app:")
        assert error["details"]["key"] in error["message"]
    # Nothing of any refused event was stored.
    assert Event.objects.filter(session__app=acme.app).count() == events_before
    assert _shared_state(acme) == ({}, {})


def test_a_user_token_of_no_session_writes_its_users_state_and_its_sessions(acme):
    token = _token(acme, ["event_append"])
    result = _append(token, {"user:seat": "window", "topic": "travel"})
    assert result["isError"] is False, result
    assert _shared_state(acme) == ({}, {"seat": "window"})
    assert Session.objects.get(app=acme.app, session_id=SID).state == {"topic": "travel"}


def test_a_session_bound_token_writes_neither_user_nor_app_state(acme):
    token = _token(acme, ["event_append"], session_id=SID)
    error = error_of(_append(token, {"user:seat": "aisle"}))
    assert error["code"] == "state_scope_denied" and error["details"]["scope"] == "user"
    error = error_of(_append(token, {"app:banner": "x"}))
    assert error["code"] == "state_scope_denied" and error["details"]["scope"] == "app"
    assert _shared_state(acme) == ({}, {})
    # Its own session's state it writes.
    assert _append(token, {"step": 2})["isError"] is False
    assert Session.objects.get(app=acme.app, session_id=SID).state == {"step": 2}


def test_an_api_key_writes_every_scope(acme):
    result = _append(acme.key, {"app:banner": "welcome", "user:seat": "window"})
    assert result["isError"] is False, result
    assert _shared_state(acme) == ({"banner": "welcome"}, {"seat": "window"})


def test_a_session_bound_token_writes_no_user_artifact_over_rest(acme):
    from rest_framework.test import APIClient

    base = f"/api/v1/apps/acme/users/{USER}/sessions/{SID}/artifacts"
    body = {"data_base64": "aGk=", "mime_type": "text/plain"}
    bound = APIClient()
    bound.credentials(
        HTTP_AUTHORIZATION=f"Bearer {_token(acme, ['artifact_put', 'artifact_delete'], SID)}"
    )
    refused = bound.post(f"{base}/user:profile.txt", body, format="json")
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["code"] == "artifact_scope_denied"
    assert bound.delete(f"{base}/user:profile.txt").status_code == 403
    assert bound.post(f"{base}/notes.txt", body, format="json").status_code == 201
    unbound = APIClient()
    unbound.credentials(HTTP_AUTHORIZATION=f"Bearer {_token(acme, ['artifact_put'])}")
    assert unbound.post(f"{base}/user:profile.txt", body, format="json").status_code == 201


# ----------------------------------------------------------- nothing leaves unpruned


def _canary(name: str) -> str:
    return f"sk-live-{name.replace('_', '-')}-{secrets.token_hex(12)}"


def _plant(acme) -> dict[str, str]:
    """Canaries in every field of an event a client may fill, and in memory: under keys that
    name credentials (plain values) and as values shaped like credentials."""
    plain = {
        name: f"plain{name}{secrets.token_hex(8)}" for name in ("args", "delta", "meta", "resp")
    }
    shaped = {
        name: _canary(name)
        for name in ("text", "args", "response", "delta", "meta", "error", "state", "input")
    }
    client = acme.client()
    events = [
        {
            "event_id": "e1",
            "author": "user",
            "content": {"role": "user", "parts": [{"text": f"my key is {shaped['text']}"}]},
            "actions": {"state_delta": {"api_key": plain["delta"], "note": shaped["delta"]}},
            "custom_metadata": {"password": plain["meta"], "label": shaped["meta"]},
        },
        {
            "event_id": "e2",
            "author": "agent",
            "invocation_id": "i1",
            "content": {
                "role": "model",
                "parts": [
                    {
                        "function_call": {
                            "id": "c1",
                            "name": "login",
                            "args": {"client_secret": plain["args"], "hint": shaped["args"]},
                        }
                    }
                ],
            },
            "error_message": f"upstream refused {shaped['error']}",
        },
        {
            "event_id": "e3",
            "author": "agent",
            "invocation_id": "i1",
            "content": {
                "role": "user",
                "parts": [
                    {
                        "function_response": {
                            "id": "c1",
                            "name": "login",
                            "response": {"token": plain["resp"], "echo": shaped["response"]},
                        }
                    }
                ],
            },
        },
    ]
    appended = client.post(
        f"/api/v1/apps/acme/users/{USER}/sessions/{SID}/events", {"events": events}, format="json"
    )
    assert appended.status_code == 201, appended.content
    # Memory as the database may hold it (written before today's checks, or by a path that
    # does not check): the way out is cleaned whatever the way in let through.
    entry, _created = entries.add_memory(
        acme.app,
        USER,
        new_memory.parse_new_memory({"content": "alice flies to Lisbon on Friday"}),
    )
    from memory.models import MemoryEntry

    MemoryEntry.objects.filter(pk=entry["id"]).update(
        metadata={"note": shaped["state"], "secret": plain["meta"]}
    )
    return {**{f"plain_{k}": v for k, v in plain.items()}, **shaped, "memory_id": entry["id"]}


def _everything_read(acme, planted: dict) -> dict[str, str]:
    """The text of every tool's and resource's answer that reads this session or memory."""
    key = acme.key
    answers = {
        "session_events": call(key, "session_events", {"user_id": USER, "session_id": SID}),
        "context_build": call(
            key, "context_build", {"user_id": USER, "session_id": SID, "query": "key?"}
        ),
        "session_list": call(key, "session_list", {"user_id": USER}),
        "memory_search": call(key, "memory_search", {"user_id": USER, "query": "Lisbon"}),
        "memory_get": call(key, "memory_get", {"user_id": USER, "memory_id": planted["memory_id"]}),
        "memory_history": call(
            key, "memory_history", {"user_id": USER, "memory_id": planted["memory_id"]}
        ),
        "event_append": call(
            key,
            "event_append",
            {
                "user_id": USER,
                "session_id": SID,
                "event": {
                    "author": "user",
                    "content": {"role": "user", "parts": [{"text": f"again {planted['input']}"}]},
                },
            },
        ),
    }
    for name, uri in (
        ("resource_context", f"ctxadmin://users/{USER}/sessions/{SID}/context"),
        ("resource_memories", f"ctxadmin://users/{USER}/memories"),
    ):
        status, body = mcp_post(key, _message("resources/read", {"uri": uri}))
        assert status == 200, body
        answers[name] = json.loads(body)["result"]
    for name, answer in answers.items():
        assert name.startswith("resource") or answer["isError"] is False, (name, answer)
        assert not name.startswith("resource") or answer["contents"], (name, answer)
    return {name: json.dumps(answer) for name, answer in answers.items()}


def test_no_credential_leaves_through_any_tool_or_resource(acme):
    planted = _plant(acme)
    read = _everything_read(acme, planted)
    # Every tool that reads is covered (the writers answer what they wrote, also read here).
    readers = {tool.name for tool in mcp_tools.TOOLS if tool.read_only}
    assert readers - {"ingestion_status"} <= set(read), readers - set(read)
    for name, text in read.items():
        for canary, value in planted.items():
            if canary == "memory_id":
                continue
            assert value not in text, (name, canary)
    # ... while what is not a credential still comes through.
    assert "Lisbon" in read["memory_search"] and "Lisbon" in read["memory_get"]
    assert "my key is [redacted]" in read["session_events"]
    assert '"hint"' in read["session_events"] and '"client_secret"' not in read["session_events"]


def test_rest_keeps_the_stored_event_for_its_owner(acme):
    """The owner's key reads its events back over REST as stored (ADK round-trips them): only
    what leaves through MCP, to a model, is cleaned."""
    planted = _plant(acme)
    listed = acme.client().get(f"/api/v1/apps/acme/users/{USER}/sessions/{SID}/events")
    assert listed.status_code == 200
    assert planted["plain_args"] in listed.content.decode()


# --------------------------------------------------------- every request admitted


def test_resource_reads_are_rate_limited_counted_and_logged(acme, settings, caplog):
    settings.CTXADMIN_MCP_CALLS_PER_MINUTE = 2
    _row, key = create_api_key(acme.app, list(SCOPES), name="reader")
    uri = f"ctxadmin://users/{USER}/sessions/{SID}/context"
    caplog.set_level(logging.INFO, logger="ctxadmin.mcp")
    for _ in range(2):
        status, body = mcp_post(key, _message("resources/read", {"uri": uri}))
        assert status == 200 and "result" in json.loads(body), body
    status, body = mcp_post(key, _message("resources/read", {"uri": uri}))
    error = json.loads(body)["error"]
    assert error["data"]["error"]["code"] == "rate_limited", error
    assert error["data"]["error"]["details"]["retry_after_s"] > 0
    # A tool call shares the same limit.
    assert error_of(call(key, "session_list", {"user_id": USER}))["code"] == "rate_limited"
    lines = [r for r in caplog.records if r.getMessage() == "mcp call"]
    outcomes = [(r.tool, r.outcome) for r in lines]
    assert outcomes.count(("resource:context", "ok")) == 2, outcomes
    assert ("resource:context", "rate_limited") in outcomes
    assert all(uri not in str(vars(r)) for r in lines)


# --------------------------------------------------------------- strict bodies


def _raw_post(credential: str, body: bytes) -> tuple[int, dict]:
    import io
    from wsgiref.util import setup_testing_defaults

    from tests.service.leaks.mcp_flows import _dispatcher

    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/mcp",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_ACCEPT": "application/json, text/event-stream",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_AUTHORIZATION": f"Bearer {credential}",
        "wsgi.input": io.BytesIO(body),
    }
    setup_testing_defaults(environ)
    answer: dict = {}

    def start_response(status, headers, exc_info=None):
        answer["status"] = int(status.split()[0])

    content = b"".join(_dispatcher()(environ, start_response))
    return answer["status"], json.loads(content)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ('{"query": NaN}', "malformed_json"),
        ('{"query": Infinity}', "malformed_json"),
        ('{"query": "x", "limit": 184467440737095516160}', "number_out_of_range"),
        ('{"query": "x", "query": "y"}', "malformed_json"),
        ('{"query": "x", "filter": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}", "json_too_deep"),
        ('{"query": "a\\u0000b"}', "invalid_characters"),
        ('{"query": "\\ud800"}', "invalid_characters"),
    ],
)
def test_mcp_bodies_follow_the_rest_apis_strict_json(acme, arguments, code):
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
        '{"name": "memory_search", "arguments": '
        + arguments.replace('"query"', '"user_id": "alice", "query"', 1)
        + "}}"
    ).encode()
    status, answer = _raw_post(acme.key, body)
    assert status == 400, answer
    assert answer["error"]["code"] == code, answer
    assert set(answer["error"]) == {"code", "message", "details"}


# ------------------------------------------------------------ unexpected errors


def test_an_unexpected_error_is_an_internal_error_envelope(acme, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire: alice's secret plans")

    # A failure the service does not expect, injected where the ORM would raise one.
    monkeypatch.setattr(mcp_tools.entries, "get_memory", broken)
    result = call(acme.key, "memory_get", {"user_id": USER, "memory_id": "m1"})
    error = error_of(result)
    assert error == {
        "code": "internal_error",
        "message": "The request could not complete.",
        "details": {},
    }
    assert "disk on fire" not in json.dumps(result) and "TypeError" not in json.dumps(result)


def test_the_sdks_validation_lines_do_not_quote_the_request(acme, caplog):
    from ctxadmin.telemetry import SdkLinesContentFree

    canary = _canary("params")
    caplog.handler.addFilter(SdkLinesContentFree())
    caplog.set_level(logging.DEBUG)
    # params of the wrong shape: the SDK's own validation refuses the request.
    status, body = mcp_post(acme.key, _message("tools/call", {"name": 7, "arguments": canary}))
    assert status in (200, 400), body
    logged = [r.getMessage() for r in caplog.records]
    assert all(canary not in line for line in logged), logged
    assert any(r.getMessage().startswith("mcp sdk: ") for r in caplog.records)


# ------------------------------------------------- capabilities say what they do


def _rest(token: str):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_a_replacing_add_needs_the_delete_capability_too(acme):
    url = f"/api/v1/apps/acme/users/{USER}/memories"
    first = {"content": "seat: aisle", "idempotency_key": "seat"}
    assert acme.client().post(url, first, format="json").status_code == 201
    again = {"content": "seat: window", "idempotency_key": "seat", "replace": True}
    adder = _rest(_token(acme, ["memory_add"]))
    refused = adder.post(url, again, format="json")
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["code"] == "capability_denied"
    assert refused.json()["error"]["details"] == {"needed": "memory_delete"}
    from memory.models import MemoryEntry

    assert MemoryEntry.objects.get(app=acme.app, idempotency_key="seat").content == "seat: aisle"
    batch = adder.post(f"{url}/batch", {"memories": [again]}, format="json")
    assert batch.status_code == 403, batch.content
    assert batch.json()["error"]["details"] == {"needed": "memory_delete"}
    both = _rest(_token(acme, ["memory_add", "memory_delete"]))
    assert both.post(url, again, format="json").status_code == 200
    assert MemoryEntry.objects.get(app=acme.app, idempotency_key="seat").content == "seat: window"


def test_refreshing_expiries_needs_the_add_capability(acme):
    url = f"/api/v1/apps/acme/users/{USER}/memories"
    added = acme.client().post(url, {"content": "short lived", "ttl_seconds": 60}, format="json")
    assert added.status_code == 201, added.content
    body = {"ids": [added.json()["id"]]}
    searcher = _rest(_token(acme, ["memory_search"]))
    refused = searcher.post(f"{url}/touch", body, format="json")
    assert refused.status_code == 403, refused.content
    assert refused.json()["error"]["details"] == {"needed": "memory_add"}
    assert (
        _rest(_token(acme, ["memory_add"])).post(f"{url}/touch", body, format="json").status_code
        == 200
    )
