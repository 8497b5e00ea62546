"""``CtxAdminStore`` beside LangGraph's own ``InMemoryStore``: the same generated batches of
puts, deletes, gets, filtered searches and namespace listings answer the same items; then
what is ctxadmin's own: semantic search, numbers compared as numbers, the user scope taken
from the namespace's first label, and the limits LangGraph's in-memory store does not have."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from ctxadmin_client import Client, NotFoundError
from ctxadmin_client.langgraph import CtxAdminStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

SPACES = (("a",), ("a", "b"), ("c",))
KEYS = ("k1", "k2", "k3")
WORDS = st.text(alphabet="abc xyz", min_size=1, max_size=6)
VALUES = st.fixed_dictionaries(
    {"n": st.one_of(st.integers(-20, 20), st.floats(-20, 20, allow_nan=False))},
    optional={
        "s": WORDS,
        "tags": st.lists(st.sampled_from(("x", "y")), max_size=2),
        "nested": st.fixed_dictionaries({"flag": st.booleans()}),
    },
)
FILTERS = st.one_of(
    st.none(),
    st.fixed_dictionaries({"s": WORDS}),
    st.fixed_dictionaries({"n": st.integers(-20, 20)}),
    st.fixed_dictionaries(
        {
            "n": st.dictionaries(
                st.sampled_from(("$gt", "$gte", "$lt", "$lte")),
                st.integers(-20, 20),
                min_size=1,
                max_size=2,
            )
        }
    ),
    st.fixed_dictionaries({"s": st.fixed_dictionaries({"$ne": WORDS})}),
    st.fixed_dictionaries({"nested": st.fixed_dictionaries({"flag": st.booleans()})}),
    st.fixed_dictionaries({"tags": st.lists(st.sampled_from(("x", "y")), max_size=2)}),
)
# A TTL long enough not to pass during an example: the items compare as without one (the
# in-memory store keeps no TTL), while reads refresh them (GetOp's and SearchOp's
# ``refresh_ttl`` default to True).
put = st.builds(
    lambda ns, key, value, ttl: ("put", ns, key, value, ttl),
    st.sampled_from(SPACES),
    st.sampled_from(KEYS),
    st.one_of(st.none(), VALUES, VALUES),
    st.sampled_from((None, None, 60.0)),
)
get = st.builds(lambda ns, key: ("get", ns, key), st.sampled_from(SPACES), st.sampled_from(KEYS))
search = st.builds(
    lambda prefix, filter, limit, offset: ("search", prefix, filter, limit, offset),
    st.sampled_from(((), ("a",), ("a", "b"), ("c",), ("*",))),
    FILTERS,
    st.sampled_from((1, 2, 100)),
    st.sampled_from((0, 0, 1)),
)
namespaces = st.builds(
    lambda suffix, depth, limit, offset: ("namespaces", suffix, depth, limit, offset),
    st.sampled_from((None, ("b",), ("*",))),
    st.sampled_from((None, 1, 2)),
    st.sampled_from((1, 100)),
    st.sampled_from((0, 1)),
)
BATCHES = st.lists(
    st.lists(st.one_of(put, put, put, get, search, search, namespaces), min_size=1, max_size=5),
    min_size=2,
    max_size=8,
)


def to_op(user: str, spec: tuple) -> Any:
    kind = spec[0]
    if kind == "put":
        return PutOp((user, *spec[1]), spec[2], spec[3], ttl=spec[4])
    if kind == "get":
        return GetOp((user, *spec[1]), spec[2])
    if kind == "search":
        _, prefix, filter, limit, offset = spec
        return SearchOp((user, *prefix), filter, limit, offset)
    _, suffix, depth, limit, offset = spec
    conditions = [MatchCondition("prefix", (user,))]
    if suffix:
        conditions.append(MatchCondition("suffix", suffix))
    return ListNamespacesOp(tuple(conditions), depth, limit, offset)


def plain(item) -> Any:
    return None if item is None else (item.namespace, item.key, json.dumps(item.value))


def reference_answer(reference: InMemoryStore, op: Any, answer: Any) -> Any:
    """The in-memory store's answer, as ctxadmin must match it. Search order is the
    backend's own (LangGraph's stores differ: insertion order in memory, newest first in
    PostgreSQL), so a search answers its matches and a page of them is checked for size
    and membership; a namespace with no item left is not listed (the in-memory store keeps
    empty ones)."""
    if isinstance(op, GetOp):
        return plain(answer)
    if isinstance(op, SearchOp):
        every = reference.search(op.namespace_prefix, filter=op.filter, limit=10_000)
        return {plain(item) for item in every}
    full = reference.list_namespaces(
        prefix=op.match_conditions[0].path,
        suffix=op.match_conditions[1].path if len(op.match_conditions) > 1 else None,
        max_depth=None,
        limit=10_000,
    )
    held = {item.namespace for item in reference.search(op.match_conditions[0].path, limit=10_000)}
    kept = [ns for ns in full if ns in held]
    if op.max_depth is not None:
        kept = sorted({ns[: op.max_depth] for ns in kept})
    return kept[op.offset : op.offset + op.limit]


@pytest.fixture(scope="module")
def store(app):
    with CtxAdminStore(app.base_url, app.key, app=app.name) as made:
        yield made


async def compare(batches, run_batch) -> None:
    user = f"u-{uuid.uuid4().hex[:12]}"
    reference = InMemoryStore()
    for specs in batches:
        ops = [to_op(user, spec) for spec in specs]
        # LangGraph's in-memory store reads a search prefix's "*" as a label, ctxadmin's as
        # any label (as namespace conditions do): not compared.
        ops = [
            op for op in ops if not isinstance(op, SearchOp) or op.namespace_prefix[1:2] != ("*",)
        ]
        if not ops:
            continue
        # Reads see the store before the batch's puts: the reference's expected answers are
        # taken before it applies them too.
        expected = []
        for op in ops:
            if isinstance(op, PutOp):
                expected.append(None)
            else:
                expected.append(reference_answer(reference, op, reference.batch([op])[0]))
        reference.batch([op for op in ops if isinstance(op, PutOp)])
        mine = await run_batch(ops)
        for op, want, got in zip(ops, expected, mine, strict=True):
            if isinstance(op, SearchOp):
                got_items = [plain(item) for item in got]
                assert set(got_items) <= want, op
                assert len(got_items) == len(sorted(want, key=repr)[op.offset :][: op.limit]), op
            elif isinstance(op, GetOp):
                assert plain(got) == want, op
            elif isinstance(op, ListNamespacesOp):
                assert got == want, op
            else:
                assert got is None


@pytest.mark.parametrize("mode", ["sync", "async"])
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batches=BATCHES)
def test_the_store_answers_as_langgraphs_in_memory_store(store, app, mode, batches):
    if mode == "sync":

        async def run_batch(ops):
            return store.batch(ops)

        asyncio.run(compare(batches, run_batch))
        return

    async def run() -> None:
        # A fresh AsyncClient per event loop (each example runs in its own).
        async with CtxAdminStore(app.base_url, app.key, app=app.name) as fresh:
            await compare(batches, fresh.abatch)

    asyncio.run(run())


@pytest.mark.anyio
async def test_async_batches_and_semantic_search(app):
    user = f"u-{uuid.uuid4().hex[:12]}"
    async with CtxAdminStore(app.base_url, app.key, app=app.name) as store:
        await store.aput((user, "notes"), "seat", {"text": "Alice prefers window seats"})
        await store.aput((user, "notes"), "food", {"text": "Alice is vegetarian"})
        await store.aput((user, "other"), "seat", {"text": "window seats in another namespace"})
        hits = await store.asearch((user, "notes"), query="which seat does Alice like?")
        assert [h.key for h in hits][:1] == ["seat"]
        assert all(h.namespace == (user, "notes") for h in hits)
        assert hits[0].score is not None
        got = await store.aget((user, "notes"), "food")
        assert got.value == {"text": "Alice is vegetarian"}
        await store.adelete((user, "notes"), "food")
        assert await store.aget((user, "notes"), "food") is None


def test_numbers_compare_as_numbers_and_never_as_text(store):
    user = f"u-{uuid.uuid4().hex[:12]}"
    for key, priority in (("a", 9), ("b", 10), ("c", 10.5), ("d", "10"), ("e", 100)):
        store.put((user, "tasks"), key, {"priority": priority})
    # As text, "10" < "9" and "100" < "9": PostgreSQL's store finds a, and not b, c, e.
    found = store.search((user, "tasks"), filter={"priority": {"$gt": 9}})
    assert sorted(item.key for item in found) == ["b", "c", "e"]
    found = store.search((user, "tasks"), filter={"priority": {"$gte": 10, "$lt": 100}})
    assert sorted(item.key for item in found) == ["b", "c"]
    found = store.search((user, "tasks"), filter={"priority": 10})
    assert sorted(item.key for item in found) == ["b"]


def test_the_first_label_is_the_user_scope(store, app):
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    store.put((alice, "prefs"), "theme", {"value": "dark"})
    store.put((bob, "prefs"), "theme", {"value": "light"})
    assert store.get((alice, "prefs"), "theme").value == {"value": "dark"}
    assert [i.value for i in store.search((bob,))] == [{"value": "light"}]
    with Client(app.base_url, app.key) as client:
        stored = list(client.list_memories(app.name, alice))
        assert [m["metadata"]["lg.key"] for m in stored] == ["theme"]
        client.erase_user_memories(app.name, alice)
    assert store.get((alice, "prefs"), "theme") is None
    assert store.get((bob, "prefs"), "theme") is not None
    # A put replaces: one memory per namespace and key.
    store.put((bob, "prefs"), "theme", {"value": "blue"})
    with Client(app.base_url, app.key) as client:
        assert len(list(client.list_memories(app.name, bob))) == 1


def test_what_the_store_refuses(store):
    for ttl in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            store.put(("someone", "x"), "k", {"v": 1}, ttl=ttl)
    with pytest.raises(ValueError, match="operator"):
        store.search(("someone",), filter={"n": {"$regex": "a"}})
    # A batch with one bad operation makes no request: nothing of it is applied.
    user = f"u-{uuid.uuid4().hex[:12]}"
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp((user, "x"), "k", {"v": 1}), SearchOp((user, "a.b"))])
    assert store.get((user, "x"), "k") is None


def test_a_put_is_a_new_version_of_the_items_fact(store, app):
    """A put's memory is a version of the item's fact key: the next put supersedes it, so
    one current memory per item however many puts, the earlier values in its history, a
    put of the same value again is that version, and a delete takes the history too."""
    user = f"u-{uuid.uuid4().hex[:12]}"
    store.put((user, "prefs"), "theme", {"value": "dark"})
    with Client(app.base_url, app.key) as client:
        (first,) = client.list_memories(app.name, user)
        assert first["key"].startswith("langgraph.")
        store.put((user, "prefs"), "theme", {"value": "light"})
        store.put((user, "prefs"), "theme", {"value": "blue"})
        store.put((user, "prefs"), "theme", {"value": "blue"})  # a retry: that version
        (last,) = client.list_memories(app.name, user)
        assert last["key"] == first["key"] and last["id"] != first["id"]
        assert json.loads(last["content"]) == {"value": "blue"}
        history = client.memory_history(app.name, user, last["id"])["versions"]
        assert [json.loads(v["content"]) for v in history] == [
            {"value": "dark"},
            {"value": "light"},
            {"value": "blue"},
        ]
        assert store.get((user, "prefs"), "theme").value == {"value": "blue"}
        store.delete((user, "prefs"), "theme")
        assert store.get((user, "prefs"), "theme") is None
        for version in history:
            with pytest.raises(NotFoundError):
                client.get_memory(app.name, user, version["id"])


def test_other_memories_of_one_key_read_as_the_newest_until_deleted(store, app):
    """A memory carrying an item's namespace and key that a put did not write (added
    directly, or by an earlier version of the adapter): reads show the newest once, and a
    put of None deletes them all."""
    user = f"u-{uuid.uuid4().hex[:12]}"
    store.put((user, "prefs"), "theme", {"value": "dark"})
    metadata = {
        "lg.namespace": [user, "prefs"],
        "lg.depth": 2,
        "lg.key": "theme",
        "lg.ns.1": "prefs",
    }
    with Client(app.base_url, app.key) as client:
        client.add_memory(app.name, user, '{"value":"light"}', metadata=metadata)
        assert [i.value for i in store.search((user,))] == [{"value": "light"}]
        assert store.get((user, "prefs"), "theme").value == {"value": "light"}
        store.put((user, "prefs"), "theme", {"value": "blue"})
        assert [i.value for i in store.search((user,))] == [{"value": "blue"}]
        assert store.get((user, "prefs"), "theme").value == {"value": "blue"}
        store.delete((user, "prefs"), "theme")
        assert list(client.list_memories(app.name, user)) == []
    assert store.get((user, "prefs"), "theme") is None


def test_concurrent_puts_of_one_item_leave_one_memory(app):
    user = f"u-{uuid.uuid4().hex[:12]}"

    async def run() -> None:
        async with CtxAdminStore(app.base_url, app.key, app=app.name) as fresh:
            await asyncio.gather(
                *(fresh.aput((user, "n"), "k", {"v": index}) for index in range(8))
            )

    asyncio.run(run())
    with Client(app.base_url, app.key) as client:
        assert len(list(client.list_memories(app.name, user))) == 1
    with CtxAdminStore(app.base_url, app.key, app=app.name) as fresh:
        assert fresh.get((user, "n"), "k").value["v"] in range(8)
