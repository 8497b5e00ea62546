"""The MCP rate limit is per credential and shared by every web process (it lives in Redis):
past the limit a call is a ``rate_limited`` tool error with the seconds to wait; another
credential is not held back. Without Redis, each process limits on its own and nothing fails."""

from __future__ import annotations

import json

import pytest

from ctxadmin import mcp_calls
from tests.conftest import make_tenant
from tests.service.leaks.mcp_flows import mcp_post

pytestmark = pytest.mark.django_db(transaction=True)


def _search(key: str) -> dict:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_search", "arguments": {"user_id": "u", "query": "tea"}},
    }
    status, body = mcp_post(key, message)
    assert status == 200, body
    return json.loads(body)["result"]


@pytest.fixture
def low_limit(settings):
    settings.CTXADMIN_MCP_CALLS_PER_MINUTE = 3
    client = mcp_calls._redis().client
    for key in client.scan_iter(mcp_calls._key("rate", "*")):
        client.delete(key)
    return settings


def test_past_the_limit_a_call_is_refused_with_the_wait(low_limit):
    owner = make_tenant("acme")
    second = make_tenant("globex")
    for _ in range(3):
        assert _search(owner.key)["isError"] is False
    refused = _search(owner.key)
    assert refused["isError"] is True
    error = refused["structuredContent"]["error"]
    assert error["code"] == "rate_limited"
    assert "At most 3 MCP calls a minute" in error["message"]
    assert 0 < error["details"]["retry_after_s"] <= 60
    # Another credential has its own allowance.
    assert _search(second.key)["isError"] is False


def test_the_limit_is_shared_by_every_process(low_limit):
    owner = make_tenant("acme")
    for _ in range(3):
        assert _search(owner.key)["isError"] is False
    # A second web process starts with nothing of its own: what it holds is in Redis.
    mcp_calls.reset()
    assert _search(owner.key)["structuredContent"]["error"]["code"] == "rate_limited"


def test_without_redis_each_process_limits_alone(low_limit):
    owner = make_tenant("acme")
    low_limit.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    mcp_calls.reset()
    try:
        for _ in range(3):
            assert _search(owner.key)["isError"] is False
        assert _search(owner.key)["structuredContent"]["error"]["code"] == "rate_limited"
        # Counted straight into PostgreSQL meanwhile.
        from ctxadmin.models import McpCallCount

        assert McpCallCount.objects.get(app=owner.app).calls == 4
    finally:
        mcp_calls.reset()  # the next call connects to the restored REDIS_URL
