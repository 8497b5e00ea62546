"""Each MCP tool call, refused or not, counts in the console's dashboard (a count per app and
hour, never its arguments); a refused credential is a 401 and counts nothing. Counts gather in
Redis and a beat task moves them into PostgreSQL; the dashboard shows both."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model

from ctxadmin import mcp_calls
from ctxadmin.models import McpCallCount
from ctxadmin.tasks import flush_mcp_counts
from tests.conftest import make_tenant
from tests.service.leaks.mcp_flows import mcp_post

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_pending_counts():
    mcp_calls._redis().client.delete(mcp_calls.counts_key())
    yield
    mcp_calls._redis().client.delete(mcp_calls.counts_key())


def _call(name: str, arguments: dict) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def _dashboard_calls(client) -> str:
    return client.get("/admin/dashboard/data.json").json()["figures"]["mcp_calls"]


def test_mcp_calls_count_on_the_dashboard(client):
    owner = make_tenant("acme")
    other = make_tenant("globex")
    status, body = mcp_post(owner.key, _call("memory_search", {"user_id": "u", "query": "tea"}))
    assert status == 200
    assert json.loads(body)["result"]["isError"] is False
    status, body = mcp_post(owner.key, _call("memory_search", {"user_id": "u", "nope": 1}))
    assert status == 200 and json.loads(body)["result"]["isError"] is True
    status, body = mcp_post(other.key, _call("no_such_tool", {}))
    assert status == 200 and json.loads(body)["result"]["isError"] is True
    status, _body = mcp_post("ctx_wrong", _call("memory_search", {"query": "tea"}))
    assert status == 401
    status, body = mcp_post(owner.key, _call("memory_search", {"query": "t"}), host="evil.test")
    assert status == 400 and json.loads(body)["error"]["code"] == "disallowed_host"

    client.force_login(get_user_model().objects.create_superuser("op", password="op-pw-123456"))
    # Not yet moved into PostgreSQL: the dashboard counts what Redis holds.
    assert McpCallCount.objects.count() == 0
    assert _dashboard_calls(client) == "3"

    flush_mcp_counts()
    assert sorted(McpCallCount.objects.values_list("app__name", "calls")) == [
        ("acme", 2),
        ("globex", 1),
    ]
    assert mcp_calls.pending() == {}
    assert _dashboard_calls(client) == "3"

    # Later calls add to the same hour's row.
    mcp_post(owner.key, _call("memory_search", {"user_id": "u", "query": "tea"}))
    assert _dashboard_calls(client) == "4"
    flush_mcp_counts()
    assert McpCallCount.objects.get(app__name="acme").calls == 3


def test_counts_of_a_deleted_app_are_dropped():
    gone = make_tenant("gone")
    mcp_post(gone.key, _call("memory_search", {"user_id": "u", "query": "tea"}))
    gone.app.delete()
    assert mcp_calls.flush() == 1
    assert McpCallCount.objects.count() == 0


def test_old_hours_are_pruned():
    owner = make_tenant("acme")
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    old = now - timedelta(days=31)
    McpCallCount.objects.create(app=owner.app, hour=old, calls=5)
    McpCallCount.objects.create(app=owner.app, hour=now, calls=2)
    assert mcp_calls.prune(now) == 1
    assert list(McpCallCount.objects.values_list("calls", flat=True)) == [2]
