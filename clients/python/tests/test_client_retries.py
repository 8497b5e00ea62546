"""Retries, backoff, ``Retry-After``, timeouts and the headers every request carries, against
a local HTTP server that answers from a script (the ctxadmin server never sends these
failures on demand)."""

from __future__ import annotations

import asyncio
import random

import pytest
from ctxadmin_client import (
    USER_AGENT,
    AsyncClient,
    Client,
    RateLimitedError,
    ServiceUnavailableError,
    TransportError,
    __version__,
)
from ctxadmin_client._retry import RetryPolicy

OK = (200, {}, {"ok": True})
UNAVAILABLE = (
    503,
    {"Retry-After": "0"},
    {"error": {"code": "database_unavailable", "message": "down", "details": {}}},
)


def test_a_get_answered_503_with_retry_after_is_retried(scripted_server):
    scripted_server.script = [UNAVAILABLE, UNAVAILABLE, OK]
    with Client(scripted_server.url, "ctx_test", backoff=0) as client:
        assert client.get_key("demo") == {"ok": True}
    assert [r["method"] for r in scripted_server.received] == ["GET", "GET", "GET"]


def test_a_non_idempotent_post_is_not_retried(scripted_server):
    scripted_server.script = [UNAVAILABLE, OK]
    with Client(scripted_server.url, "ctx_test", backoff=0) as client:
        with pytest.raises(ServiceUnavailableError) as refused:
            client.create_session("demo", "alice")
    assert refused.value.code == "database_unavailable" and refused.value.retry_after == 0
    assert len(scripted_server.received) == 1


def test_posts_the_api_makes_idempotent_are_retried(scripted_server):
    scripted_server.script = [UNAVAILABLE, OK] * 5
    with Client(scripted_server.url, "ctx_test", backoff=0) as client:
        client.append_event("demo", "alice", "s-1", {"event_id": "e-1", "author": "user"})
        client.add_memory("demo", "alice", "text", idempotency_key="k-1")
        # The same text again is the stored memory: an add without a key is safe to repeat.
        client.add_memory("demo", "alice", "text")
        client.search_memory("demo", "alice", "text")
        client.build_context("demo", "alice", "s-1", current_input={"role": "user", "parts": []})
    assert len(scripted_server.received) == 10
    scripted_server.received.clear()
    scripted_server.script = [UNAVAILABLE]
    with Client(scripted_server.url, "ctx_test", backoff=0) as client:
        with pytest.raises(ServiceUnavailableError):
            client.append_event("demo", "alice", "s-1", {"author": "user"})
    assert len(scripted_server.received) == 1


def test_retries_stop_after_max_retries(scripted_server):
    scripted_server.script = [UNAVAILABLE] * 5
    with Client(scripted_server.url, "ctx_test", max_retries=2, backoff=0) as client:
        with pytest.raises(ServiceUnavailableError):
            client.get_key("demo")
    assert len(scripted_server.received) == 3


def test_a_retry_after_beyond_the_cap_is_raised_at_once(scripted_server):
    limited = (
        429,
        {"Retry-After": "3600"},
        {"error": {"code": "slow", "message": "", "details": {}}},
    )
    scripted_server.script = [limited, OK]
    with Client(scripted_server.url, "ctx_test", backoff=0) as client:
        with pytest.raises(RateLimitedError) as refused:
            client.get_key("demo")
    assert refused.value.retry_after == 3600 and len(scripted_server.received) == 1


def test_a_timeout_is_a_transport_error(scripted_server):
    scripted_server.script = ["sleep"]
    with Client(scripted_server.url, "ctx_test", timeout=0.2, max_retries=0) as client:
        with pytest.raises(TransportError):
            client.get_key("demo")


def test_a_timed_out_get_is_retried(scripted_server):
    scripted_server.script = ["sleep", OK]
    with Client(scripted_server.url, "ctx_test", timeout=1.0, backoff=0) as client:
        assert client.get_key("demo") == {"ok": True}
    assert len(scripted_server.received) == 2


def test_a_refused_connection_is_a_transport_error():
    with Client("http://127.0.0.1:9", "ctx_test", max_retries=1, backoff=0) as client:
        with pytest.raises(TransportError):
            client.get_key("demo")


def test_the_async_client_retries_the_same_way(scripted_server):
    scripted_server.script = [UNAVAILABLE, OK, UNAVAILABLE, OK]

    async def run() -> None:
        async with AsyncClient(scripted_server.url, "ctx_test", backoff=0) as client:
            assert await client.get_key("demo") == {"ok": True}
            with pytest.raises(ServiceUnavailableError):
                await client.create_session("demo", "alice")

    asyncio.run(run())
    assert [r["method"] for r in scripted_server.received] == ["GET", "GET", "POST"]


def test_requests_carry_the_key_and_the_user_agent(scripted_server):
    with Client(scripted_server.url, "ctx_secret", headers={"X-Trace": "t-1"}) as client:
        client.get_key("demo")
    headers = scripted_server.received[0]["headers"]
    assert headers["Authorization"] == "Bearer ctx_secret"
    assert headers["User-Agent"] == USER_AGENT
    assert USER_AGENT.startswith(f"ctxadmin-client/{__version__} ")
    assert headers["X-Trace"] == "t-1"


def test_a_next_url_on_another_host_is_followed_on_the_clients_own(scripted_server):
    scripted_server.script = [
        (
            200,
            {},
            {
                "results": [{"n": 1}],
                "next": "http://elsewhere.example/api/v1/apps/demo/keys?cursor=c2",
                "previous": None,
            },
        ),
        (200, {}, {"results": [{"n": 2}], "next": None, "previous": None}),
    ]
    with Client(scripted_server.url, "ctx_test") as client:
        assert [k["n"] for k in client.list_keys("demo", limit=1)] == [1, 2]
    assert [r["path"] for r in scripted_server.received] == [
        "/api/v1/apps/demo/keys?limit=1",
        "/api/v1/apps/demo/keys?cursor=c2",
    ]


def test_the_backoff_doubles_with_jitter_and_honours_retry_after():
    policy = RetryPolicy(max_retries=4, backoff=1.0, max_backoff=5.0, rng=random.Random(7))
    waits = [policy.delay(n, status=503, retry_after=None) for n in range(4)]
    for n, wait in enumerate(waits):
        ceiling = min(5.0, 2.0**n)
        assert ceiling / 2 <= wait <= ceiling
    assert policy.delay(4, status=503, retry_after=None) is None
    assert policy.delay(0, status=503, retry_after=2.5) == 2.5
    assert policy.delay(0, status=500, retry_after=None) is None
    assert policy.delay(0, status=None, retry_after=None) is not None
