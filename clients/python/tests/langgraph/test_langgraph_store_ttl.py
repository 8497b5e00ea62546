"""``CtxAdminStore``'s TTL as LangGraph means it: a put's ``ttl`` (minutes) or the store's
``TTLConfig`` default sets the memory's expiry, reads with ``refresh_ttl`` restart it, and
an expired item is gone for every read."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta

import pytest
from ctxadmin_client import Client, ValidationError
from ctxadmin_client.langgraph import CtxAdminStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TTL_KEYS = ("k1", "k2")
TTL_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(TTL_KEYS), st.sampled_from((None, 1.0, 30.0))),
        st.tuples(st.just("get"), st.sampled_from(TTL_KEYS), st.booleans()),
        st.tuples(st.just("search"), st.just(None), st.booleans()),
    ),
    min_size=1,
    max_size=6,
)


def user_id() -> str:
    return f"u-{uuid.uuid4().hex[:12]}"


def expiries(app, user) -> dict[str, datetime | None]:
    """Each item's key and its memory's ``expires_at``."""
    with Client(app.base_url, app.key) as client:
        return {
            entry["metadata"]["lg.key"]: (
                None if entry["expires_at"] is None else datetime.fromisoformat(entry["expires_at"])
            )
            for entry in client.list_memories(app.name, user)
        }


def lifetime(app, user, key) -> timedelta:
    with Client(app.base_url, app.key) as client:
        entry = next(
            e for e in client.list_memories(app.name, user) if e["metadata"]["lg.key"] == key
        )
    return datetime.fromisoformat(entry["expires_at"]) - datetime.fromisoformat(entry["created_at"])


@pytest.fixture(scope="module")
def store(app):
    with CtxAdminStore(app.base_url, app.key, app=app.name) as made:
        yield made


def test_a_puts_ttl_sets_the_expiry_and_reads_refresh_it(store, app):
    user = user_id()
    store.put((user, "trip"), "hotel", {"name": "Lisboa"}, ttl=30)
    store.put((user, "trip"), "plain", {"name": "none"})
    first = expiries(app, user)
    assert first["plain"] is None
    assert abs(lifetime(app, user, "hotel") - timedelta(minutes=30)) < timedelta(seconds=1)

    assert store.get((user, "trip"), "hotel", refresh_ttl=False).value == {"name": "Lisboa"}
    assert expiries(app, user) == first  # not refreshed
    assert store.get((user, "trip"), "hotel").value == {"name": "Lisboa"}  # refreshed
    second = expiries(app, user)
    assert second["hotel"] > first["hotel"] and second["plain"] is None

    assert [item.key for item in store.search((user,), refresh_ttl=False)] != []
    assert expiries(app, user) == second
    assert {item.key for item in store.search((user, "trip"))} == {"hotel", "plain"}
    third = expiries(app, user)
    assert third["hotel"] > second["hotel"]
    store.search((user, "trip"), query="Lisboa")  # a semantic search refreshes what it answers
    assert expiries(app, user)["hotel"] >= third["hotel"]

    store.put((user, "trip"), "hotel", {"name": "Porto"})  # a put without ttl: none
    assert expiries(app, user)["hotel"] is None


def test_the_ttl_config_gives_the_default_and_the_read_refresh(app):
    user = user_id()
    config = {"default_ttl": 2.0, "refresh_on_read": False}
    with CtxAdminStore(app.base_url, app.key, app=app.name, ttl=config) as timed:
        timed.put((user, "n"), "k", {"v": 1})
        assert abs(lifetime(app, user, "k") - timedelta(minutes=2)) < timedelta(seconds=1)
        before = expiries(app, user)
        timed.get((user, "n"), "k")
        timed.search((user,))
        assert expiries(app, user) == before  # refresh_on_read is off
        timed.get((user, "n"), "k", refresh_ttl=True)
        assert expiries(app, user)["k"] > before["k"]
        timed.put((user, "n"), "k", {"v": 2}, ttl=None)  # None: no TTL at all
        assert expiries(app, user)["k"] is None


def test_an_expired_item_is_gone_for_every_read(store, app):
    """The smallest TTL the server takes, one second (a put's minutes are rounded up)."""
    user = user_id()
    store.put((user, "a"), "brief", {"v": 1}, ttl=0.001)
    store.put((user, "b"), "kept", {"v": 2})
    assert store.get((user, "a"), "brief") is not None
    time.sleep(1.2)
    assert store.get((user, "a"), "brief") is None
    assert [item.key for item in store.search((user,))] == ["kept"]
    assert store.list_namespaces(prefix=(user,)) == [(user, "b")]


def test_the_async_store_keeps_ttls_too(app):
    user = user_id()

    async def run() -> None:
        async with CtxAdminStore(app.base_url, app.key, app=app.name) as fresh:
            await fresh.aput((user, "n"), "k", {"v": 1}, ttl=5)
            before = expiries(app, user)["k"]
            await fresh.aget((user, "n"), "k")
            assert expiries(app, user)["k"] > before

    asyncio.run(run())
    assert abs(lifetime(app, user, "k") - timedelta(minutes=5)) < timedelta(seconds=5)


def test_the_apps_policy_bounds_a_ttl(store, app):
    """A TTL past the app's ``default_ttl_seconds`` is refused by the server, whole."""
    user = user_id()
    with Client(app.base_url, app.key) as client:
        client.set_memory_policy(app.name, default_ttl_seconds=3600)
        try:
            with pytest.raises(ValidationError, match="ttl_seconds"):
                store.put((user, "n"), "k", {"v": 1}, ttl=61)
            store.put((user, "n"), "k", {"v": 1}, ttl=60)
        finally:
            client.set_memory_policy(app.name)
    assert store.get((user, "n"), "k").value == {"v": 1}


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=TTL_STEPS)
def test_expiries_follow_puts_and_refreshing_reads(store, app, steps):
    """Generated puts (with and without a TTL) and reads (refreshing or not): after each, a
    put's memory expires after its TTL or never; a refreshing read moves the expiry of each
    item it returned that has a TTL later, and nothing else moves."""
    user = user_id()
    ttls: dict[str, float | None] = {}  # the items put, and their TTL
    before: dict[str, datetime | None] = {}
    for kind, key, arg in steps:
        if kind == "put":
            store.put((user, "n"), key, {"v": key}, ttl=arg)
            ttls[key] = arg
        elif kind == "get":
            found = store.get((user, "n"), key, refresh_ttl=arg)
            assert (found is None) == (key not in ttls)
        else:
            found = store.search((user,), refresh_ttl=arg)
            assert {item.key for item in found} == set(ttls)
        after = expiries(app, user)
        assert set(after) == set(ttls)
        for name, ttl in ttls.items():
            if kind == "put" and name == key:
                if ttl is None:
                    assert after[name] is None
                else:
                    assert abs(lifetime(app, user, name) - timedelta(minutes=ttl)) < timedelta(
                        seconds=1
                    )
                continue
            read = kind == "search" or name == key
            if ttl is not None and arg is True and kind != "put" and read:
                assert after[name] > before[name], (kind, name)
            else:
                assert after[name] == before[name], (kind, name)
        before = after
