"""``CtxAdminStore``: LangGraph's ``BaseStore`` on ctxadmin's long-term memory.

**Mapping.** A namespace's first label names the ctxadmin user whose memory holds the item
(``("alice", "prefs")`` lives in user ``alice``'s memory, so erasing ``alice`` erases her
items, and a search never crosses users); it must be a valid user id (1-128 characters of
``A-Z a-z 0-9 . _ : @ -``, starting with a letter or digit). Each item is one memory: its
content is the value as JSON (what lexical and vector search read), its metadata holds the
whole namespace (``lg.namespace``), one key per label after the first (``lg.ns.1``, ...,
for prefix filters the server applies), the depth (``lg.depth``), the key (``lg.key``) and
the put's ``index`` (``lg.index``). A put is one call: the memory's idempotency key is the
namespace and key, hashed, and the server replaces the memory holding it in place, in one
statement (``replace``), so concurrent puts of one item leave one memory. A put of ``None``
deletes every memory of the namespace and key (a list, then a delete each).

**Reads.** ``get`` is the newest memory of the namespace and key. ``search`` without a
query lists the prefix's memories newest first; with a query it is ctxadmin's hybrid search
in the user's memory (``score`` is the hit's score; only hits with evidence are returned).
The value ``filter`` keeps LangGraph's semantics and is applied by this adapter: equality
(dicts field by field, lists element by element), ``$eq``, ``$ne``, and ``$gt``/``$gte``/
``$lt``/``$lte``, which compare numbers as numbers and strings as strings (see
``_filters``). ``list_namespaces`` needs a prefix condition whose first label names the
user. As in LangGraph's in-memory store, a batch's reads see the store as it was before the
batch's puts, and the last put of a namespace and key wins. Other memories carrying an
item's namespace and key (added directly, or by earlier versions of this adapter, which
added a memory per put) read as one item, the newest, until a put of ``None`` deletes them.

**Limits.** Memory's: a value's JSON at most ``CTXADMIN_MEMORY_MAX_CONTENT_BYTES`` (32 KiB by
default); a value that looks like it carries a credential is refused (422
``sensitive_memory_content``), and so are a namespace label or key that does (the server
checks a memory's metadata as its content); a namespace's labels and key within
``CTXADMIN_MEMORY_MAX_METADATA_BYTES``. Under a legal hold, or within the app's retention
period, a put that would replace an item is refused (409 ``legal_hold``,
``memory_retained``), as erasing it would be.

**TTL.** ``supports_ttl`` is True: a put's ``ttl`` (minutes, or the store's ``TTLConfig``
``default_ttl``) becomes the memory's ``ttl_seconds`` (rounded up to whole seconds, at least
1), which the app's memory policy bounds (at most its ``default_ttl_seconds``, at least its
``retention_days``; else 400 ``validation_error``); the metadata marks it (``lg.ttl``). A
``get`` or ``search`` with ``refresh_ttl`` (default: the ``TTLConfig``'s
``refresh_on_read``, else True) touches the items it returns that have a TTL, in one more
call (none when none has). An expired item is gone for every read at once; the server's
purge deletes it later. Without a ``ttl`` the app's policy (``default_ttl_seconds``) applies.

``batch`` speaks through a ``Client``, ``abatch`` through an ``AsyncClient``: each operation
is written once, as the requests it makes, and each of the two runs them.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from ctxadmin_client import AsyncClient, Client, NotFoundError
from ctxadmin_client.langgraph import _filters
from ctxadmin_client.langgraph._connection import Connection, Holding

NAMESPACE = "lg.namespace"
KEY = "lg.key"
DEPTH = "lg.depth"
INDEX = "lg.index"
TTL = "lg.ttl"
#: Memories read per page while listing.
PAGE_SIZE = 200
#: Hits asked of a semantic search (the API's maximum).
SEARCH_LIMIT = 100


def _label_key(position: int) -> str:
    return f"lg.ns.{position}"


def _item_key(namespace: tuple[str, ...], key: str) -> str:
    """The idempotency key of an item's memory: its namespace and key, hashed."""
    named = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    return "langgraph:" + hashlib.sha256(named.encode("utf-8")).hexdigest()


def _user(namespace: tuple[str, ...], what: str) -> str:
    if not namespace or namespace[0] == "*":
        raise ValueError(
            f"{what} needs a namespace (prefix) whose first label names the ctxadmin user"
        )
    return namespace[0]


def _scope_filter(prefix: tuple[str, ...], *, exact: bool = False) -> dict[str, Any]:
    """The memory filter of the items under ``prefix`` (the user aside), or in exactly it."""
    found: dict[str, Any] = {KEY: {"$exists": True}}
    for position, label in enumerate(prefix[1:], start=1):
        if label != "*":
            found[_label_key(position)] = label
    if exact:
        found[DEPTH] = len(prefix)
    return found


def _item(entry: Mapping[str, Any], score: float | None = None, *, scored: bool = False):
    metadata = entry["metadata"]
    stamp = entry.get("created_at") or entry["timestamp"]  # a search hit has its time only
    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    fields = {
        "namespace": tuple(metadata[NAMESPACE]),
        "key": metadata[KEY],
        "value": json.loads(entry["content"]),
        "created_at": when,
        "updated_at": when,
    }
    if scored:
        return SearchItem(**fields, score=score)
    return Item(**fields)


@dataclass(frozen=True)
class _Scan:
    """Read the user's memories under ``filter``, newest first, page by page, until
    ``enough`` says the items kept so far suffice (None: read them all)."""

    user: str
    filter: dict[str, Any]
    keep: Callable[[dict[str, Any]], bool]
    enough: int | None = None


@dataclass(frozen=True)
class _Call:
    """One client method (``search_memory``, ``add_memory``, ``delete_memory``)."""

    method: str
    args: tuple
    kwargs: dict[str, Any]
    missing_ok: bool = False


Plan = Generator["_Scan | _Call", Any, Any]


def _check(op: Op) -> None:
    if isinstance(op, GetOp | PutOp):
        _user(op.namespace, "an item")
        ttl = getattr(op, "ttl", None)
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf
        ):
            raise ValueError("a ttl is a positive number of minutes")
    elif isinstance(op, SearchOp):
        _user(op.namespace_prefix, "a search")
        _filters.check(op.filter)
    elif isinstance(op, ListNamespacesOp):
        prefixes = [c.path for c in op.match_conditions or () if c.match_type == "prefix"]
        if not prefixes:
            raise ValueError(
                "list_namespaces needs a prefix whose first label names the ctxadmin user"
            )
        _user(tuple(prefixes[0]), "list_namespaces")


class CtxAdminStore(Holding, BaseStore):
    """LangGraph's long-term memory store kept in ctxadmin app ``app`` (default: the API key's
    own app, asked once; a key with the ``memory`` scope). ``base_url``/``api_key``
    (default ``CTXADMIN_URL``/``CTXADMIN_API_KEY``) make the clients, or pass ready ones as
    ``client`` (sync) and ``async_client``. ``search_mode``: ``hybrid`` (default),
    ``lexical`` or ``vector``.
    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``; the
    server purges expired items, so ``sweep_interval_minutes`` is not used)."""

    supports_ttl = True

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        app: str | None = None,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        search_mode: str | None = None,
        ttl: TTLConfig | None = None,
        **client_options: Any,
    ) -> None:
        self._connection = Connection(
            base_url,
            api_key,
            app=app,
            client=client,
            async_client=async_client,
            **client_options,
        )
        self.app = self._connection.app
        self.search_mode = search_mode
        self.ttl_config = ttl

    # ------------------------------------------------------------------ batches
    def _plans(self, ops: Iterable[Op]) -> tuple[list[Plan | None], list[Plan]]:
        """A plan per read (None for a put), and the puts' plans, to run after the reads: as
        in LangGraph's in-memory store, a batch's reads see the store before its puts, and
        the last put of a namespace and key wins."""
        reads: list[Plan | None] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        ops = list(ops)
        for op in ops:  # every operation checked before any request: nothing half-applies
            _check(op)
        for op in ops:
            if isinstance(op, GetOp):
                reads.append(self._get(op))
            elif isinstance(op, SearchOp):
                reads.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                reads.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts.pop((op.namespace, op.key), None)
                puts[(op.namespace, op.key)] = op
                reads.append(None)
            else:
                raise ValueError(f"unknown operation: {type(op).__name__}")
        return reads, [self._put(op) for op in puts.values()]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        reads, puts = self._plans(ops)
        results = [None if plan is None else self._run(plan) for plan in reads]
        for plan in puts:
            self._run(plan)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        reads, puts = self._plans(ops)
        results = [None if plan is None else await self._arun(plan) for plan in reads]
        for plan in puts:
            await self._arun(plan)
        return results

    # ------------------------------------------------------------------ the two runners
    def _run(self, plan: Plan) -> Any:
        client = self._connection.client
        answer = None
        try:
            while True:
                request = plan.send(answer)
                if isinstance(request, _Scan):
                    answer = []
                    for entry in client.list_memories(
                        self.app, request.user, filter=request.filter, limit=PAGE_SIZE
                    ):
                        if request.keep(entry):
                            answer.append(entry)
                            if request.enough is not None and len(answer) >= request.enough:
                                break
                else:
                    try:
                        answer = getattr(client, request.method)(*request.args, **request.kwargs)
                    except NotFoundError:
                        if not request.missing_ok:
                            raise
                        answer = None  # deleted meanwhile: gone either way
        except StopIteration as done:
            return done.value

    async def _arun(self, plan: Plan) -> Any:
        client = self._connection.async_client
        answer = None
        try:
            while True:
                request = plan.send(answer)
                if isinstance(request, _Scan):
                    answer = []
                    async for entry in client.list_memories(
                        self.app, request.user, filter=request.filter, limit=PAGE_SIZE
                    ):
                        if request.keep(entry):
                            answer.append(entry)
                            if request.enough is not None and len(answer) >= request.enough:
                                break
                else:
                    try:
                        answer = await getattr(client, request.method)(
                            *request.args, **request.kwargs
                        )
                    except NotFoundError:
                        if not request.missing_ok:
                            raise
                        answer = None  # deleted meanwhile: gone either way
        except StopIteration as done:
            return done.value

    # ------------------------------------------------------------------ operations
    def _current(self, namespace: tuple[str, ...], key: str) -> Plan:
        user = _user(namespace, "an item")
        found = {**_scope_filter(namespace, exact=True), KEY: key}
        return (yield _Scan(user, found, lambda _entry: True))

    def _get(self, op: GetOp) -> Plan:
        entries = yield from self._current(op.namespace, op.key)
        if not entries:
            return None
        if op.refresh_ttl:
            yield from self._touch(op.namespace[0], entries[:1])
        return _item(entries[0])

    def _touch(self, user: str, entries: Iterable[Mapping[str, Any]]) -> Plan:
        """Refresh the TTL of the items read that have one (marked ``lg.ttl``)."""
        ids = [entry["id"] for entry in entries if TTL in entry["metadata"]]
        if ids:
            yield _Call("touch_memories", (self.app, user, ids), {})

    def _put(self, op: PutOp) -> Plan:
        user = _user(op.namespace, "an item")
        if op.value is None:  # a delete: every memory of the namespace and key
            for entry in (yield from self._current(op.namespace, op.key)):
                yield _Call("delete_memory", (self.app, user, entry["id"]), {}, missing_ok=True)
            return
        metadata: dict[str, Any] = {NAMESPACE: list(op.namespace), DEPTH: len(op.namespace)}
        metadata[KEY] = op.key
        for position, label in enumerate(op.namespace[1:], start=1):
            metadata[_label_key(position)] = label
        if op.index is not None:
            metadata[INDEX] = op.index if op.index is False else list(op.index)
        options: dict[str, Any] = {
            "metadata": metadata,
            # One memory per namespace and key, replaced in place by the server in one
            # statement: concurrent puts leave one, and a retry is the same write again.
            "idempotency_key": _item_key(op.namespace, op.key),
            "replace": True,
        }
        if op.ttl is not None:
            metadata[TTL] = op.ttl
            options["ttl_seconds"] = max(1, math.ceil(op.ttl * 60))
        content = json.dumps(op.value, ensure_ascii=False, separators=(",", ":"))
        yield _Call("add_memory", (self.app, user, content), options)

    def _search(self, op: SearchOp) -> Plan:
        user = _user(op.namespace_prefix, "a search")
        _filters.check(op.filter)
        scope = _scope_filter(op.namespace_prefix)
        wanted = op.offset + op.limit
        if op.limit <= 0:
            return []
        if op.query:
            answer = yield _Call(
                "search_memory",
                (self.app, user, op.query),
                {
                    "mode": self.search_mode,
                    "limit": SEARCH_LIMIT if op.filter else min(SEARCH_LIMIT, wanted),
                    "filter": scope,
                },
            )
            seen: set[tuple[tuple[str, ...], str]] = set()
            hits = []
            for hit in answer["hits"]:
                item = _item(hit, hit.get("score"), scored=True)
                if (item.namespace, item.key) in seen:
                    continue  # each namespace and key once, at its best place
                seen.add((item.namespace, item.key))
                if _filters.item_matches(item.value, op.filter):
                    hits.append((hit, item))
            page = hits[op.offset : wanted]
            if op.refresh_ttl:
                yield from self._touch(user, (hit for hit, _item_ in page))
            return [item for _hit, item in page]
        seen: set[tuple[tuple[str, ...], str]] = set()

        def keep(entry: dict[str, Any]) -> bool:
            # Each namespace and key once (the newest), and only what the filter matches.
            metadata = entry["metadata"]
            key = (tuple(metadata[NAMESPACE]), metadata[KEY])
            if key in seen:
                return False
            seen.add(key)
            return _filters.item_matches(json.loads(entry["content"]), op.filter)

        entries = (yield _Scan(user, scope, keep, wanted))[op.offset : wanted]
        if op.refresh_ttl:
            yield from self._touch(user, entries)
        return [_item(entry, scored=True) for entry in entries]

    def _list_namespaces(self, op: ListNamespacesOp) -> Plan:
        prefix = next(tuple(c.path) for c in op.match_conditions if c.match_type == "prefix")
        user = _user(prefix, "list_namespaces")
        entries = yield _Scan(user, _scope_filter(prefix), lambda _entry: True)
        namespaces: set[tuple[str, ...]] = set()
        for entry in entries:
            namespace = tuple(entry["metadata"][NAMESPACE])
            if all(
                _filters.namespace_matches(namespace, c.match_type, tuple(c.path))
                for c in op.match_conditions
            ):
                namespaces.add(namespace[: op.max_depth] if op.max_depth is not None else namespace)
        return sorted(namespaces)[op.offset : op.offset + op.limit]
