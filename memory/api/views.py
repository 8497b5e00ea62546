"""Long-term memory over REST: add, get, erase and search, in one (app, user) scope."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response

from ctxadmin.api.pagination import PAGINATION_QUERY_PARAMS, Cursor
from ctxadmin.api.paths import path_segment_error
from ctxadmin.api.schema import ref
from ctxadmin.api.views import AppScopedView
from ctxadmin.delegated import DelegatedCredential
from ctxadmin.errors import ServiceError, invalid
from ctxadmin.models import SCOPE_MEMORY
from ctxadmin.pruning import MAX_ECHOED, echoed
from memory import entries, erasure, inputs, new_memory, versions
from memory import search as memory_search

JSON = "application/json"


class MemoryCursor(Cursor):
    # Newest first; the id orders entries added in one transaction (one now()).
    ordering = ("-created_at", "-id")


class MemoryScopedView(AppScopedView):
    required_scopes = {"*": SCOPE_MEMORY}


class MemoryListView(MemoryScopedView):
    """``GET``: the user's memories, newest first, by cursor (``?filter=`` as in search).
    ``POST``: add a memory (idempotent with ``idempotency_key``). ``DELETE``: erase a
    session's memories (``?session_id=``) or, with ``{"confirm": "erase user <user>"}``, the
    user's whole memory."""

    tool_capabilities = {"POST": "memory_add", "GET": "memory_search"}
    pagination_class = MemoryCursor

    # GET: cursor, limit, filter; DELETE: session_id (each refuses the other's).
    allowed_query_params = PAGINATION_QUERY_PARAMS | {"filter", "session_id", "as_of", "known_at"}

    @extend_schema(
        operation_id="memories_list",
        description="The user's unexpired memories, newest first: those valid at `as_of` as "
        "known at `known_at` (each ISO 8601 with a zone; absent: now), so by default what is "
        "valid now. `filter` is the search's filter object as URL-encoded JSON (e.g. "
        '`filter={"topic":"travel"}`).',
        parameters=[
            OpenApiParameter(
                "filter", str, description="a search filter object, as JSON (URL-encoded)"
            ),
            OpenApiParameter(
                "as_of", str, description="valid time: the versions true at this instant"
            ),
            OpenApiParameter(
                "known_at", str, description="record time: as ctxadmin knew them at this instant"
            ),
        ],
        responses={200: ref("MemoryPage")},
    )
    def get(self, request, app, user):
        _refuse_params(request, {"session_id"})
        query = request.query_params
        sql, params = inputs.parse_list_filter(
            query.get("filter"), query.get("as_of"), query.get("known_at")
        )
        rows = entries.live_entries(self.tenant, user, sql, params).only("id", "created_at")
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(entries.entries_by_id([row.id for row in page]))

    @extend_schema(
        operation_id="memories_add",
        description="201 with a new entry (a worker then names the memory it nearly repeats, "
        "if any, in its `near_duplicate_of`); 200 with the entry an `idempotency_key` "
        "already names (same content), the live unkeyed entry holding the same normalised "
        "text (an add without a `key`), the key's live version holding it (with a `key`), "
        "or, with `replace`, the entry it replaced.",
        request={JSON: ref("MemoryCreate")},
        responses={201: ref("Memory"), 200: ref("Memory")},
    )
    def post(self, request, app, user):
        if request.query_params:
            unknown = sorted(request.query_params)
            raise ServiceError(
                "unknown_parameter",
                f"unknown query parameter {echoed(unknown[0])!r}",
                details={"unknown": [echoed(name) for name in unknown[:MAX_ECHOED]], "allowed": []},
            )
        new = new_memory.parse_new_memory(request.data)
        refuse_replacing_without_delete(request.auth, [new])
        entry, created = entries.add_memory(self.tenant, user, new, written_by=request.auth.prefix)
        return Response(entry, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(
        operation_id="memories_erase",
        description="With `session_id`: erase that session's memories (no body). Without it: "
        'erase the user\'s whole memory; the body must be `{"confirm": "erase user <user>"}`. '
        "With `session_id`, 404 `not_found` when there is nothing to erase; a user with "
        "nothing left gets 200 and a receipt of zero counts (a retried erasure succeeds). "
        "409 `legal_hold` under a legal "
        "hold; 409 `memory_retained` when a session's entry is still in its retention period.",
        parameters=[
            OpenApiParameter(
                "session_id", str, description="erase only the memories of this session"
            )
        ],
        responses={200: ref("MemoryErasureReceipt")},
    )
    def delete(self, request, app, user):
        _refuse_params(request, PAGINATION_QUERY_PARAMS | {"filter", "as_of", "known_at"})
        key_prefix = request.auth.prefix
        session = request.query_params.get("session_id")
        if session is None:
            inputs.parse_user_confirmation(request.data, user)
            return Response(erasure.erase_user(self.tenant, user, key_prefix))
        if path_segment_error("sid", session):
            raise invalid("session_id", "must be one session id")
        if request.data:
            raise invalid("body", "erasing a session takes no body")
        return Response(erasure.erase_session(self.tenant, user, session, key_prefix))


def _require_delete(credential, message: str) -> None:
    """A user or tool token needs ``memory_delete`` too for a write that ends a memory."""
    if (
        isinstance(credential, DelegatedCredential)
        and "memory_delete" not in credential.capabilities
    ):
        raise ServiceError(
            "capability_denied", message, status_code=403, details={"needed": "memory_delete"}
        )


def refuse_replacing_without_delete(credential, news: list) -> None:
    """Replacing in place ends the entry that held the key: for a user or tool token, a
    delete as well as an add (single and batch adds alike)."""
    if any(new.replace for new in news):
        _require_delete(
            credential,
            "Replacing a memory erases the one it replaces: this token needs the "
            "'memory_delete' capability as well as 'memory_add'.",
        )


def _refuse_params(request, names) -> None:
    """A parameter this method does not read is refused, not ignored."""
    given = sorted(set(request.query_params) & set(names))
    if given:
        raise ServiceError(
            "unknown_parameter",
            f"unknown query parameter {given[0]!r} for {request.method}",
            details={"unknown": given},
        )


class MemoryDetailView(MemoryScopedView):
    tool_capabilities = {"GET": "memory_search", "DELETE": "memory_delete"}

    @extend_schema(operation_id="memories_get", responses={200: ref("Memory")})
    def get(self, request, app, user, memory_id):
        return Response(entries.get_memory(self.tenant, user, memory_id))

    @extend_schema(
        operation_id="memories_delete",
        description="Erase one entry (an erasure receipt is kept). 409 `legal_hold` under a "
        "legal hold; 409 `memory_retained` within the entry's retention period.",
        responses={204: None},
    )
    def delete(self, request, app, user, memory_id):
        erasure.erase_entry(self.tenant, user, memory_id, request.auth.prefix)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemoryBatchView(MemoryScopedView):
    tool_capabilities = {"POST": "memory_add"}

    @extend_schema(
        operation_id="memories_add_batch",
        description=f"Add 1 to {inputs.MAX_BATCH_MEMORIES} memories in one transaction, each "
        "as `POST .../memories` adds one (its checks, `idempotency_key`, `replace`, "
        "`ttl_seconds`, the app's memory policy): all of them land or none does. A refusal "
        "is the first add's error, naming it (`memories.<i>.<field>`, `details.index`). "
        "200 with each add's entry and whether it was created, in the request's order.",
        request={JSON: ref("MemoryBatch")},
        responses={200: ref("MemoryBatchResult")},
    )
    def post(self, request, app, user):
        news = new_memory.parse_new_memories(request.data)
        refuse_replacing_without_delete(request.auth, news)
        added = entries.add_memories(self.tenant, user, news, written_by=request.auth.prefix)
        return Response(
            {"memories": [{"memory": entry, "created": created} for entry, created in added]}
        )


class MemoryUsersCursor(Cursor):
    ordering = "user_id"


class MemoryUsersView(MemoryScopedView):
    """The app's users that hold memories, by user id."""

    pagination_class = MemoryUsersCursor
    allowed_query_params = PAGINATION_QUERY_PARAMS

    @extend_schema(
        operation_id="memory_users_list",
        description="The ids of the app's users whose memory holds entries (an expired "
        "entry counts until it is purged), in id order, by cursor.",
        responses={200: ref("MemoryUserPage")},
    )
    def get(self, request, app):
        page = self.paginate_queryset(entries.memory_users(self.tenant))
        return self.get_paginated_response([{"user_id": row.user_id} for row in page])


class MemoryHistoryView(MemoryScopedView):
    tool_capabilities = {"GET": "memory_search"}

    @extend_schema(
        operation_id="memories_history",
        description="The versions of this memory's key (the memory alone when it has none), "
        "oldest valid first, each with its clocks, content and who wrote it (the key's or "
        "token's prefix, the ingestion job, the source event). At most "
        "`CTXADMIN_MEMORY_HISTORY_MAX_VERSIONS` (default 50): adding a version beyond it "
        "deletes the oldest closed ones.",
        responses={200: ref("MemoryHistory")},
    )
    def get(self, request, app, user, memory_id):
        return Response({"versions": versions.memory_history(self.tenant, user, memory_id)})


class MemoryRollbackView(MemoryScopedView):
    # It ends the live version: a token needs memory_delete as well (checked in the view).
    tool_capabilities = {"POST": "memory_add"}

    @extend_schema(
        operation_id="memories_rollback",
        description="Restore this closed version's content and metadata as a new version of "
        "its key, valid from now, superseding the live one (201). No body. 409 "
        "`memory_version_live` for the live version, 409 `memory_not_keyed` for a memory "
        "without a key; 200 with the live version when it already holds that content. A "
        "token needs `memory_delete` as well as `memory_add`.",
        request=None,
        responses={201: ref("Memory"), 200: ref("Memory")},
    )
    def post(self, request, app, user, memory_id):
        if request.data:
            raise invalid("body", "a rollback takes no body")
        _require_delete(
            request.auth,
            "A rollback ends the live version: this token needs the 'memory_delete' "
            "capability as well as 'memory_add'.",
        )
        entry, created = versions.rollback_memory(
            self.tenant, user, memory_id, written_by=request.auth.prefix
        )
        return Response(entry, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class MemoryTouchView(MemoryScopedView):
    # A touch moves expiries: a write, so a token needs the capability that writes memory.
    tool_capabilities = {"POST": "memory_add"}

    @extend_schema(
        operation_id="memories_touch",
        description="Refresh the TTL of the listed memories, as a read that refreshes TTLs "
        "does: each live entry with a TTL gets `expires_at` = now + its `ttl_seconds`, in one "
        "statement; an expired entry stays expired.",
        request={JSON: ref("MemoryTouch")},
        responses={200: ref("MemoryTouchResult")},
    )
    def post(self, request, app, user):
        ids = inputs.parse_touch(request.data)
        return Response({"memories": entries.touch_memories(self.tenant, user, ids)})


class MemorySearchView(MemoryScopedView):
    tool_capabilities = {"POST": "memory_search"}

    @extend_schema(
        operation_id="memories_search",
        request={JSON: ref("MemorySearch")},
        responses={200: ref("MemorySearchResult")},
    )
    def post(self, request, app, user):
        search = inputs.parse_search(request.data)
        return Response({"hits": memory_search.search(self.tenant, user, search)})
