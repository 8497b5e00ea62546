"""``CtxAdminStore``: LangGraph's ``BaseStore`` on ctxadmin's long-term memory.

**Mapping.** Any namespace LangGraph accepts is kept as given (``lg.namespace``): labels
are any non-empty Unicode text without ``.`` or NUL (LangGraph's rule, checked alike by
``put`` and ``batch``: ``check_namespace``), ``%``, ``/``, spaces and unicode included; they
travel as JSON values, never in a path. Where it is kept: a namespace whose **first label is
a ctxadmin user id** (1-128 characters of ``A-Z a-z 0-9 . _ : @ -``, starting with a letter
or digit) lives in that user's memory (``("alice", "prefs")`` in user ``alice``'s, so
erasing ``alice`` erases her items, and a search under her prefix never reads another
user's); **any other** (``("a%b",)``, ``("東京", "x")``) lives in the memory of the store's
``default_user`` (``langgraph``: the root label LangGraph reserves, so no namespace's first
label is that user; erasing it erases those items). Reads that name no first label
(``search(())``, ``list_namespaces()`` with no prefix or a suffix only, a ``*`` first
label) read every user of the app that holds memories (``GET /memory-users``), one after
another. Each item is one memory: its content is the value as JSON (what lexical and vector
search read), its metadata holds the whole namespace, one key per label (``lg.ns.0``,
``lg.ns.1``, ..., for prefix filters the server applies to the first 24), the depth
(``lg.depth``), the key (``lg.key``) and the put's ``index`` (``lg.index``). An item is a
fact: the memory's ``key`` is ``langgraph.`` and the SHA-256 of the namespace and key, so a
put is a new version superseding the item's current one, which stays, closed, in the key's
history (``GET .../memories/{id}/history``; at most the server's
``CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS``). The server places one key's versions one at a
time, so concurrent puts of one item leave one current version; a put of the value the item
already holds is that version (a retry is harmless; its metadata stays as it was, and a
TTL is refreshed). A batch's puts of values go per user, up to 100 in one request
(``POST .../memories/batch``: each request lands whole or not at all). A put of ``None``
deletes every memory of the namespace and key and their histories (a list, a history each,
then a delete each).

**Reads.** ``get`` is the newest memory of the namespace and key. ``search`` without a
query lists the prefix's memories newest first (across users, by their time); with a query
it is ctxadmin's hybrid search in each user's memory the prefix reaches (``score`` is the
hit's score, and several users' hits are ranked by it; only hits with evidence are
returned). In a search prefix, ``*`` is any label, as in namespace conditions.
The value ``filter`` keeps LangGraph's semantics and is applied by this adapter: equality
(dicts field by field, lists element by element), ``$eq``, ``$ne``, and ``$gt``/``$gte``/
``$lt``/``$lte``, which compare numbers as numbers and strings as strings (see
``_filters``). ``list_namespaces`` takes LangGraph's ``prefix``, ``suffix``, ``max_depth``,
``limit`` and ``offset``; a namespace whose items are all deleted is not listed (the
in-memory store keeps it). As in LangGraph's in-memory store, a batch's reads see the store
as it was before the batch's puts, and the last put of a namespace and key wins. Other
memories carrying an item's namespace and key (added directly, or by earlier versions of
this adapter, which added a memory per put) read as one item, the newest, until a put of
``None`` deletes them.

**Limits.** Memory's: a value's JSON at most ``CTXADMIN_MEMORY_MAX_CONTENT_BYTES`` (32 KiB by
default); a value that looks like it carries a credential is refused (422
``sensitive_memory_content``), and so are a namespace label or key that does (the server
checks a memory's metadata as its content); a namespace's labels and key within
``CTXADMIN_MEMORY_MAX_METADATA_BYTES``. A put supersedes and deletes nothing, so it lands
under a legal hold or within the app's retention period; a put of ``None`` there is refused
(409 ``legal_hold``, ``memory_retained``), as erasing is. A refusal of one put of a batch's request
(up to 100 puts of one user) refuses the whole request: none of its puts lands; the
batch's other requests (other users', earlier chunks) are not undone.

**TTL.** ``supports_ttl`` is True: a put's ``ttl`` (minutes, or the store's ``TTLConfig``
``default_ttl``) becomes the memory's ``ttl_seconds`` (rounded up to whole seconds, at least
1), which the app's memory policy bounds (at most its ``default_ttl_seconds``, at least its
``retention_days``; else 400 ``validation_error``); the metadata marks it (``lg.ttl``). A
``get`` or ``search`` with ``refresh_ttl`` (default: the ``TTLConfig``'s
``refresh_on_read``, else True) touches the items it returns that have a TTL, in one more
call (none when none has). An expired item is gone for every read at once; the server's
purge deletes it later. Without a ``ttl`` the app's policy (``default_ttl_seconds``) applies.

``batch`` speaks through a ``Client``, ``abatch`` through an ``AsyncClient``: each operation
is written once, as the requests it makes, and each of the two runs them (``abatch`` its
reads concurrently, then its writes, several users' concurrently and each user's in turn,
within the ``AsyncClient``'s ``max_in_flight``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
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
#: The ctxadmin user holding the items whose namespace's first label is not a user id.
DEFAULT_USER = "langgraph"
#: Memories read per page while listing.
PAGE_SIZE = 200
#: Hits asked of a semantic search (the API's maximum).
SEARCH_LIMIT = 100
#: Puts of one user sent in one request (the memory batch's maximum).
BATCH_SIZE = 100
#: Ids refreshed in one touch (the API's maximum).
TOUCH_SIZE = 200
#: Label conditions the server applies (its filters take 32 conditions); the adapter
#: checks every label of what it reads either way.
SERVER_LABELS = 24
USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\Z")


def _label_key(position: int) -> str:
    return f"lg.ns.{position}"


def _fact_key(namespace: tuple[str, ...], key: str) -> str:
    """The fact key of an item's memories: ``langgraph.`` and the SHA-256 of its namespace
    and key (any text LangGraph accepts, in the fact key grammar), so each put is a new
    version of that fact and the ones before stay in its history."""
    named = json.dumps([list(namespace), key], ensure_ascii=False, separators=(",", ":"))
    return "langgraph." + hashlib.sha256(named.encode("utf-8")).hexdigest()


def _text(value: Any, what: str) -> None:
    if not isinstance(value, str):
        raise InvalidNamespaceError(f"{what} must be a string, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidNamespaceError(
            f"{what} {value!r} is not Unicode text (a lone surrogate)"
        ) from None


def check_namespace(namespace: tuple[str, ...], *, item: bool = False) -> None:
    """LangGraph's rule for a namespace, the same for ``put`` and for ``batch``: labels are
    non-empty strings without ``.`` or NUL (and Unicode text, for JSON); an item's namespace
    (``item``) has at least one label and its first is not ``langgraph``."""
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(f"a namespace is a tuple of labels, not {namespace!r}")
    if item and not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    for label in namespace:
        _text(label, "a namespace label")
        if not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace}: labels are non-empty and "
                "hold no period ('.') or NUL"
            )
    if item and namespace[0] == "langgraph":
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {namespace}'
        )


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


def _namespace(entry: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(entry["metadata"][NAMESPACE])


def _newest_first(found: Mapping[str, Any]) -> tuple[str, str]:
    return (found["entry"]["created_at"], found["entry"]["id"])


@dataclass(frozen=True)
class _Users:
    """The ids of the app's users that hold memories."""


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
    """One client method (``search_memory``, ``add_memories``, ``delete_memory``, ...)."""

    method: str
    args: tuple
    kwargs: dict[str, Any]
    missing_ok: bool = False


Plan = Generator["_Users | _Scan | _Call", Any, Any]


def _check(op: Op) -> None:
    """Every operation checked before any request (``batch`` and the methods alike)."""
    if isinstance(op, GetOp | PutOp):
        # A put of a value names an item; a get or a delete may name none (and find none).
        check_namespace(op.namespace, item=isinstance(op, PutOp) and op.value is not None)
        _text(op.key, "a key")
        if "\x00" in op.key:
            # PostgreSQL's JSON, which holds the key, cannot hold a NUL (as for labels).
            raise ValueError("a key holds no NUL character")
        ttl = getattr(op, "ttl", None)
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf
        ):
            raise ValueError("a ttl is a positive number of minutes")
    elif isinstance(op, SearchOp):
        check_namespace(op.namespace_prefix)
        _filters.check(op.filter)
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            if condition.match_type not in ("prefix", "suffix"):
                raise ValueError(f"unsupported match type {condition.match_type!r}")
            check_namespace(tuple(condition.path))
    else:
        raise ValueError(f"unknown operation {op!r}")


class CtxAdminStore(Holding, BaseStore):
    """LangGraph's long-term memory store kept in ctxadmin app ``app`` (default: the API key's
    own app, asked once; a key with the ``memory`` scope). ``base_url``/``api_key``
    (default ``CTXADMIN_URL``/``CTXADMIN_API_KEY``) make the clients, or pass ready ones as
    ``client`` (sync) and ``async_client``. ``search_mode``: ``hybrid`` (default),
    ``lexical`` or ``vector``.
    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``; the
    server purges expired items, so ``sweep_interval_minutes`` is not used).
    ``default_user``: the ctxadmin user holding the items whose namespace's first label is
    not a user id (default ``langgraph``, a root label LangGraph reserves, so no namespace
    names it as its user)."""

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
        default_user: str = DEFAULT_USER,
        **client_options: Any,
    ) -> None:
        if not isinstance(default_user, str) or not USER_ID.match(default_user):
            raise ValueError(f"default_user must be a ctxadmin user id, not {default_user!r}")
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
        self.default_user = default_user

    def user_of(self, namespace: tuple[str, ...]) -> str:
        """The ctxadmin user whose memory holds the items of ``namespace``: its first label
        when that is a user id, else ``default_user``."""
        first = namespace[0]
        return first if USER_ID.match(first) else self.default_user

    # ------------------------------------------------------------------ batches
    def _plans(self, ops: Iterable[Op]) -> tuple[list[Plan | None], dict[str, list[Plan]]]:
        """A plan per read (None for a put), and the puts' plans by user, to run after the
        reads: as in LangGraph's in-memory store, a batch's reads see the store before its
        puts, and the last put of a namespace and key wins. A user's puts of values travel
        together, up to ``BATCH_SIZE`` a request."""
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
            else:
                reads.append(None)
                puts.pop((op.namespace, op.key), None)
                puts[(op.namespace, op.key)] = op
        writes: dict[str, list[Plan]] = {}
        added: dict[str, list[dict[str, Any]]] = {}
        for op in puts.values():
            user = self.user_of(op.namespace) if op.namespace else self.default_user
            if op.value is None:
                writes.setdefault(user, []).append(self._delete(op))
            else:
                added.setdefault(user, []).append(self._memory(op))
        for user, memories in added.items():
            for start in range(0, len(memories), BATCH_SIZE):
                writes.setdefault(user, []).append(
                    self._add(user, memories[start : start + BATCH_SIZE])
                )
        return reads, writes

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        reads, writes = self._plans(ops)
        results = [None if plan is None else self._run(plan) for plan in reads]
        for plans in writes.values():
            for plan in plans:
                self._run(plan)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        reads, writes = self._plans(ops)
        # The reads together, then the users' writes together, each user's one after
        # another (the server orders a user's writes anyway: they share the scope's
        # statistics row), within the client's bound on requests in flight
        # (``AsyncClient(max_in_flight=...)``).
        results = await asyncio.gather(*(self._arun(plan) for plan in reads if plan is not None))
        answers = iter(results)

        async def in_turn(plans: list[Plan]) -> None:
            for plan in plans:
                await self._arun(plan)

        await asyncio.gather(*(in_turn(plans) for plans in writes.values()))
        return [None if plan is None else next(answers) for plan in reads]

    # ------------------------------------------------------------------ the two runners
    def _run(self, plan: Plan) -> Any:
        client = self._connection.client
        answer = None
        try:
            while True:
                request = plan.send(answer)
                if isinstance(request, _Users):
                    answer = [row["user_id"] for row in client.list_memory_users(self.app)]
                elif isinstance(request, _Scan):
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
                if isinstance(request, _Users):
                    answer = [row["user_id"] async for row in client.list_memory_users(self.app)]
                elif isinstance(request, _Scan):
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

    # ------------------------------------------------------------------ where items are
    def _users(self, prefix: tuple[str, ...], *, exact: bool = False) -> Plan:
        """The users whose memory may hold items under ``prefix``: its first label's, or
        every user that holds memories when it names none (empty, or ``*`` unless
        ``exact``: there, as in a put, ``*`` is a label like any other)."""
        if prefix and (exact or prefix[0] != "*"):
            return [self.user_of(prefix)]
        return (yield _Users())

    def _scope_filter(
        self, user: str, prefix: tuple[str, ...], *, exact: bool = False
    ) -> dict[str, Any]:
        """The memory filter narrowing ``user``'s memory to the items under ``prefix`` (or in
        exactly it). The first label is implied by a user of its own; in the default user's
        memory, which holds many first labels, it is a condition too."""
        found: dict[str, Any] = {KEY: {"$exists": True}}
        for position, label in enumerate(prefix[:SERVER_LABELS]):
            if (label == "*" and not exact) or (position == 0 and label == user):
                continue
            found[_label_key(position)] = label
        if exact:
            found[DEPTH] = len(prefix)
        return found

    def _scan(
        self,
        prefix: tuple[str, ...],
        keep: Callable[[dict[str, Any]], bool] = lambda _entry: True,
        enough: int | None = None,
        *,
        exact: bool = False,
    ) -> Plan:
        """``[(user, entry)]``: the memories of the items under ``prefix`` (``*`` any label),
        or ``exact``-ly in it (``*`` itself), each user's newest first, as far as ``keep``
        and ``enough`` say."""

        def under(entry: dict[str, Any]) -> bool:
            namespace = _namespace(entry)
            if exact:
                return namespace == prefix and keep(entry)
            return _filters.namespace_matches(namespace, "prefix", prefix) and keep(entry)

        found = []
        for user in (yield from self._users(prefix, exact=exact)):
            scope = self._scope_filter(user, prefix, exact=exact)
            entries = yield _Scan(user, scope, under, enough)
            found.extend({"user": user, "entry": entry} for entry in entries)
        return found

    # ------------------------------------------------------------------ operations
    def _current(self, namespace: tuple[str, ...], key: str) -> Plan:
        """The memories of an item, newest first."""

        def named(entry: dict[str, Any]) -> bool:
            return entry["metadata"][KEY] == key

        found = yield from self._scan(namespace, named, exact=True)
        return [row["entry"] for row in found]

    def _get(self, op: GetOp) -> Plan:
        if not op.namespace:
            return None
        entries = yield from self._current(op.namespace, op.key)
        if not entries:
            return None
        if op.refresh_ttl:
            yield from self._touch([{"user": self.user_of(op.namespace), "entry": entries[0]}])
        return _item(entries[0])

    def _touch(self, found: Iterable[Mapping[str, Any]]) -> Plan:
        """Refresh the TTL of the items read that have one (marked ``lg.ttl``), per user."""
        ids: dict[str, list[str]] = {}
        for row in found:
            if TTL in row["entry"]["metadata"]:
                ids.setdefault(row["user"], []).append(row["entry"]["id"])
        for user, chosen in ids.items():
            for start in range(0, len(chosen), TOUCH_SIZE):
                yield _Call(
                    "touch_memories", (self.app, user, chosen[start : start + TOUCH_SIZE]), {}
                )

    def _delete(self, op: PutOp) -> Plan:
        """A put of None: every memory of the namespace and key deleted, with the versions
        before the current one (the key's history)."""
        if not op.namespace:
            return
        user = self.user_of(op.namespace)
        for entry in (yield from self._current(op.namespace, op.key)):
            ids = [entry["id"]]
            if entry.get("key") is not None:
                history = yield _Call(
                    "memory_history", (self.app, user, entry["id"]), {}, missing_ok=True
                )
                ids = [v["id"] for v in (history or {}).get("versions", [])] or ids
            for memory_id in ids:
                yield _Call("delete_memory", (self.app, user, memory_id), {}, missing_ok=True)

    def _memory(self, op: PutOp) -> dict[str, Any]:
        """The memory a put of a value writes: a new version of the item's fact key
        (``_fact_key``), superseding the current one, which stays in the key's history; the
        server places a key's versions one at a time, so concurrent puts leave one current
        version, and a retry (the same value again) is that version."""
        metadata: dict[str, Any] = {NAMESPACE: list(op.namespace), DEPTH: len(op.namespace)}
        metadata[KEY] = op.key
        for position, label in enumerate(op.namespace):
            metadata[_label_key(position)] = label
        if op.index is not None:
            metadata[INDEX] = op.index if op.index is False else list(op.index)
        memory: dict[str, Any] = {
            "content": json.dumps(op.value, ensure_ascii=False, separators=(",", ":")),
            "metadata": metadata,
            "key": _fact_key(op.namespace, op.key),
        }
        if op.ttl is not None:
            metadata[TTL] = op.ttl
            memory["ttl_seconds"] = max(1, math.ceil(op.ttl * 60))
        return memory

    def _add(self, user: str, memories: list[dict[str, Any]]) -> Plan:
        if len(memories) == 1:
            memory = dict(memories[0])
            answer = yield _Call("add_memory", (self.app, user, memory.pop("content")), memory)
            stored = [answer]
        else:
            answer = yield _Call("add_memories", (self.app, user, memories), {})
            stored = [row["memory"] for row in answer["memories"]]
        # A put of the value an item already holds is that version: a TTL it asks for is
        # the version's, refreshed (one more call, only when a put has a TTL).
        if any(TTL in memory["metadata"] for memory in memories):
            yield from self._touch({"user": user, "entry": entry} for entry in stored)

    def _search(self, op: SearchOp) -> Plan:
        _filters.check(op.filter)
        wanted = op.offset + op.limit
        if op.limit <= 0:
            return []
        prefix = op.namespace_prefix
        if op.query:
            return (yield from self._semantic(op, wanted))
        seen: set[tuple[tuple[str, ...], str]] = set()

        def keep(entry: dict[str, Any]) -> bool:
            # Each namespace and key once (the newest), and only what the filter matches.
            key = (_namespace(entry), entry["metadata"][KEY])
            if key in seen:
                return False
            seen.add(key)
            return _filters.item_matches(json.loads(entry["content"]), op.filter)

        # Each user's first ``wanted``, newest first: together, they hold the newest of all.
        found = yield from self._scan(prefix, keep, wanted)
        page = sorted(found, key=_newest_first, reverse=True)[op.offset : wanted]
        if op.refresh_ttl:
            yield from self._touch(page)
        return [_item(row["entry"], scored=True) for row in page]

    def _semantic(self, op: SearchOp, wanted: int) -> Plan:
        """ctxadmin's search in each user's memory the prefix reaches; the hits of several
        users ranked together by score."""
        prefix = op.namespace_prefix
        seen: set[tuple[tuple[str, ...], str]] = set()
        hits = []
        for user in (yield from self._users(prefix)):
            answer = yield _Call(
                "search_memory",
                (self.app, user, op.query),
                {
                    "mode": self.search_mode,
                    "limit": SEARCH_LIMIT if op.filter else min(SEARCH_LIMIT, wanted),
                    "filter": self._scope_filter(user, prefix),
                },
            )
            for hit in answer["hits"]:
                item = _item(hit, hit.get("score"), scored=True)
                if (item.namespace, item.key) in seen:
                    continue  # each namespace and key once, at its best place
                if not _filters.namespace_matches(item.namespace, "prefix", prefix):
                    continue
                seen.add((item.namespace, item.key))
                if _filters.item_matches(item.value, op.filter):
                    hits.append(({"user": user, "entry": hit}, item))
        if len({row["user"] for row, _item_ in hits}) > 1:
            hits.sort(key=lambda pair: pair[1].score or 0.0, reverse=True)
        page = hits[op.offset : wanted]
        if op.refresh_ttl:
            yield from self._touch(row for row, _item_ in page)
        return [item for _row, item in page]

    def _list_namespaces(self, op: ListNamespacesOp) -> Plan:
        conditions = op.match_conditions or ()
        prefix = next((tuple(c.path) for c in conditions if c.match_type == "prefix"), ())
        namespaces: set[tuple[str, ...]] = set()
        for row in (yield from self._scan(prefix)):
            namespace = _namespace(row["entry"])
            if all(
                _filters.namespace_matches(namespace, c.match_type, tuple(c.path))
                for c in conditions
            ):
                namespaces.add(namespace[: op.max_depth] if op.max_depth is not None else namespace)
        return sorted(namespaces)[op.offset : op.offset + op.limit]
