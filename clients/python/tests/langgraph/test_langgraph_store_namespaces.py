"""Any namespace LangGraph accepts, beside LangGraph's ``InMemoryStore``: first labels that
are user ids and first labels that are not (``a%b``, ``a/b``, unicode, spaces), any later
label and key; ``list_namespaces`` without a prefix, with a suffix only, ``max_depth``,
``limit`` and ``offset``; ``search(())``. Then the tenancy the mapping keeps (a user's
items in that user's memory, erased with it) and the one validation ``put`` and ``batch``
share."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from ctxadmin_client import Client
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

# Two user ids and first labels that are none (they share the default user's memory).
FIRST = ("alice", "bob-1", "a%b", "a/b", "x y", "ü", "東京", "%2F", "langgraph-ish:@")
LABEL_TEXT = st.text(
    st.characters(blacklist_characters=".\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=4,
)
# "*" in an item's namespace is a label like any other (a get or a delete names it exactly).
LATER = st.one_of(st.sampled_from(("b", "%", "/", " ", "*", "*x", "ü")), LABEL_TEXT)
NAMESPACES = st.builds(
    lambda first, rest: (first, *rest),
    st.sampled_from(FIRST),
    st.lists(LATER, max_size=2),
)
# Any key but one holding a NUL (PostgreSQL cannot store it: refused, see below) or a lone
# surrogate (not Unicode text).
KEYS = st.one_of(
    st.sampled_from(("k", "")),
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=3),
)
VALUES = st.fixed_dictionaries({"n": st.integers(0, 9)})
PATHS = st.lists(
    st.one_of(st.sampled_from(FIRST), st.just("*"), LATER), min_size=1, max_size=2
).map(tuple)


def op_strategy(pool: list[tuple[str, ...]]):
    spaces = st.one_of(NAMESPACES, st.sampled_from(pool)) if pool else NAMESPACES
    put = st.builds(lambda ns, k, v: PutOp(ns, k, v), spaces, KEYS, VALUES)
    delete = st.builds(lambda ns, k: PutOp(ns, k, None), spaces, KEYS)
    get = st.builds(GetOp, spaces, KEYS)
    search = st.builds(
        lambda prefix, limit, offset: SearchOp(prefix, None, limit, offset),
        st.one_of(st.just(()), spaces.map(lambda ns: ns[:1])),
        st.sampled_from((1, 3, 100)),
        st.sampled_from((0, 1)),
    )
    listing = st.builds(
        lambda prefix, suffix, depth, limit, offset: ListNamespacesOp(
            tuple(
                [MatchCondition("prefix", prefix)] * bool(prefix)
                + [MatchCondition("suffix", suffix)] * bool(suffix)
            ),
            depth,
            limit,
            offset,
        ),
        st.one_of(st.none(), PATHS),
        st.one_of(st.none(), PATHS),
        st.sampled_from((None, 1, 2)),
        st.sampled_from((1, 2, 100)),
        st.sampled_from((0, 1)),
    )
    return st.one_of(put, put, put, delete, get, search, listing)


@st.composite
def batches(draw) -> list[list[Any]]:
    pool: list[tuple[str, ...]] = []
    out = []
    for _ in range(draw(st.integers(2, 6))):
        ops = draw(st.lists(op_strategy(pool), min_size=1, max_size=5))
        pool.extend(op.namespace for op in ops if isinstance(op, PutOp))
        out.append(ops)
    return out


def plain(item) -> Any:
    return None if item is None else (item.namespace, item.key, json.dumps(item.value))


def expected(reference: InMemoryStore, op: Any) -> Any:
    """The in-memory store's answer on the items it holds. Its searches answer in insertion
    order (ctxadmin's newest first): a search is compared as the set of all matches and the
    size of the page. It keeps a namespace whose items were all deleted: the listing is
    that of an in-memory store holding just the live items."""
    if isinstance(op, GetOp):
        return plain(reference.batch([op])[0])
    if isinstance(op, SearchOp):
        every = reference.search(op.namespace_prefix, limit=100_000)
        return {plain(item) for item in every}
    live = InMemoryStore()
    live.batch([PutOp(i.namespace, i.key, i.value) for i in reference.search((), limit=100_000)])
    return live.batch([op])[0]


def clear(app) -> None:
    with Client(app.base_url, app.key) as client:
        for row in list(client.list_memory_users(app.name)):
            client.erase_user_memories(app.name, row["user_id"])


async def compare(app, op_batches, run_batch) -> None:
    reference = InMemoryStore()
    for ops in op_batches:
        wanted = [None if isinstance(op, PutOp) else expected(reference, op) for op in ops]
        reference.batch([op for op in ops if isinstance(op, PutOp)])
        answers = await run_batch(ops)
        for op, want, got in zip(ops, wanted, answers, strict=True):
            if isinstance(op, SearchOp):
                found = [plain(item) for item in got]
                assert set(found) <= want, op
                assert len(found) == len(sorted(want, key=repr)[op.offset :][: op.limit]), op
            elif isinstance(op, GetOp):
                assert plain(got) == want, op
            else:
                assert got == want, op
    # Every item back, whatever its labels: the whole store, listed and searched.
    held = reference.search((), limit=100_000)
    assert {plain(i) for i in (await run_batch([SearchOp((), None, 100_000)]))[0]} == {
        plain(i) for i in held
    }


@pytest.fixture(scope="module")
def own_app(make_app):
    """An app of this module's own: its listings without a user span the whole app."""
    return make_app()


@pytest.mark.parametrize("mode", ["sync", "async"])
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(op_batches=batches())
def test_any_namespace_answers_as_langgraphs_in_memory_store(own_app, mode, op_batches):
    clear(own_app)
    if mode == "sync":
        with CtxAdminStore(own_app.base_url, own_app.key, app=own_app.name) as store:

            async def run_batch(ops):
                return store.batch(ops)

            asyncio.run(compare(own_app, op_batches, run_batch))
        return

    async def run() -> None:
        async with CtxAdminStore(own_app.base_url, own_app.key, app=own_app.name) as store:
            await compare(own_app, op_batches, store.abatch)

    asyncio.run(run())


def test_a_user_label_keeps_its_tenancy_and_others_share_the_default_user(make_app):
    app = make_app()
    alice = f"alice-{uuid.uuid4().hex[:8]}"
    with CtxAdminStore(app.base_url, app.key, app=app.name) as store:
        store.put((alice, "prefs"), "theme", {"v": "dark"})
        store.put(("a%b", "prefs"), "theme", {"v": "light"})
        store.put(("東京", "a/b"), "", {"v": "unicode"})
        assert store.user_of((alice, "x")) == alice
        assert store.user_of(("a%b",)) == store.default_user == "langgraph"
        with Client(app.base_url, app.key) as client:
            users = {row["user_id"] for row in client.list_memory_users(app.name)}
            assert users == {alice, "langgraph"}
            (mine,) = client.list_memories(app.name, alice)
            assert mine["metadata"]["lg.namespace"] == [alice, "prefs"]
            client.erase_user_memories(app.name, alice)
        assert store.get((alice, "prefs"), "theme") is None
        assert store.list_namespaces() == [("a%b", "prefs"), ("東京", "a/b")]
        assert store.get(("東京", "a/b"), "").value == {"v": "unicode"}
        assert [i.key for i in store.search(("a%b",))] == ["theme"]
        # "*" in an item's namespace is that label, not any label.
        store.put(("a%b", "*"), "k", {"v": "star"})
        store.put(("a%b", "x"), "k", {"v": "x"})
        assert store.get(("a%b", "*"), "k").value == {"v": "star"}
        store.delete(("a%b", "*"), "k")
        assert store.get(("a%b", "*"), "k") is None
        assert store.get(("a%b", "x"), "k").value == {"v": "x"}
    with CtxAdminStore(app.base_url, app.key, app=app.name, default_user="shared") as other:
        other.put(("a%b",), "k", {"v": 1})
        with Client(app.base_url, app.key) as client:
            assert len(list(client.list_memories(app.name, "shared"))) == 1
    with pytest.raises(ValueError, match="default_user"):
        CtxAdminStore(app.base_url, app.key, app=app.name, default_user="not a user id")


BAD = [
    ("a.b",),
    ("x", "a.b"),
    ("x", ""),
    ("x", "a\x00b"),
    ("langgraph", "x"),
    (),
    ("x", "\ud800"),
    ("x", 3),
]


@pytest.mark.parametrize("namespace", BAD, ids=repr)
def test_put_and_batch_refuse_the_same_namespaces(store_app, namespace):
    app = store_app
    with CtxAdminStore(app.base_url, app.key, app=app.name) as store:
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})
        with pytest.raises(InvalidNamespaceError):
            store.batch([PutOp(namespace, "k", {"v": 1})])

        async def run() -> None:
            async with CtxAdminStore(app.base_url, app.key, app=app.name) as fresh:
                with pytest.raises(InvalidNamespaceError):
                    await fresh.abatch([PutOp(namespace, "k", {"v": 1})])

        asyncio.run(run())
        assert store.search((), limit=100) == []


@pytest.mark.parametrize("key", ["a\x00b", "\ud800"], ids=repr)
def test_put_and_batch_refuse_a_key_postgresql_cannot_hold(store_app, key):
    with CtxAdminStore(store_app.base_url, store_app.key, app=store_app.name) as store:
        for put in (
            lambda: store.put(("x",), key, {"v": 1}),
            lambda: store.batch([PutOp(("x",), key, {"v": 1})]),
        ):
            with pytest.raises(ValueError):
                put()
        assert store.search((), limit=100) == []


@pytest.fixture(scope="module")
def store_app(make_app):
    return make_app()
