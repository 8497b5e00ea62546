"""Each MCP tool call, refused or not, counts in the console's dashboard (a count per app and
hour, never its arguments); a refused credential is a 401 and counts nothing."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from ctxadmin.models import McpCallCount
from tests.conftest import make_tenant
from tests.service.leaks.mcp_flows import mcp_post

pytestmark = pytest.mark.django_db(transaction=True)


def _call(name: str, arguments: dict) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def test_mcp_calls_count_on_the_dashboard(client):
    owner = make_tenant("acme")
    status, body = mcp_post(owner.key, _call("memory_search", {"user_id": "u", "query": "tea"}))
    assert status == 200
    assert json.loads(body)["result"]["isError"] is False
    status, body = mcp_post(owner.key, _call("memory_search", {"user_id": "u", "nope": 1}))
    assert status == 200 and json.loads(body)["result"]["isError"] is True
    status, _body = mcp_post("ctx_wrong", _call("memory_search", {"query": "tea"}))
    assert status == 401
    status, body = mcp_post(owner.key, _call("memory_search", {"query": "t"}), host="evil.test")
    assert status == 400 and json.loads(body)["error"]["code"] == "disallowed_host"

    assert list(McpCallCount.objects.values_list("app__name", "calls")) == [("acme", 2)]
    client.force_login(get_user_model().objects.create_superuser("op", password="op-pw-123456"))
    figures = client.get("/admin/dashboard/data.json").json()["figures"]
    assert figures["mcp_calls"] == "2"
