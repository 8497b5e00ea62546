"""Long-term memory, its governance and the ingestion outbox."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ._base import B, D, L, N, Runners
from ._calls import Call, body, path, query, user_path


def instant(value: datetime | str | None) -> str | None:
    """An instant as the API takes it: ISO 8601 (a datetime needs its time zone)."""
    return value.isoformat() if isinstance(value, datetime) else value


class MemoryOperations(Runners[D, L, N, B]):
    # ------------------------------------------------------------------ entries
    def add_memory(
        self,
        app: str,
        user_id: str,
        content: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        key: str | None = None,
        valid_from: datetime | str | None = None,
        **extra: Any,
    ) -> D:
        """Add a memory (``extra``: ``provenance``, ``embed``, ``erasure_epoch``,
        ``ttl_seconds``). With a ``key`` (``preference.seat``), a new version of that fact,
        valid from ``valid_from`` (default: the provenance timestamp, else now); its answer's
        ``supersedes`` names the version it cut short; without one, the same text again (its
        case, spacing and end punctuation aside) answers the stored memory, and a worker
        names one it nearly repeats in its ``near_duplicate_of``. A repeat of any add answers the
        stored entry, so it is retried."""
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "memories"),
                json=body(
                    content=content,
                    metadata=metadata,
                    idempotency_key=idempotency_key,
                    key=key,
                    valid_from=instant(valid_from),
                    **extra,
                ),
                idempotent=True,
            )
        )

    def add_memories(self, app: str, user_id: str, memories: Sequence[Mapping[str, Any]]) -> D:
        """Add 1 to 100 memories (each a ``POST .../memories`` body: ``content``,
        ``metadata``, ``idempotency_key``, ``replace``, ...) in one transaction: all land or
        none does. ``{"memories": [{"memory", "created"}]}`` in order. Retried only when
        every add has an ``idempotency_key`` or a ``key`` (a repeat answers what is stored)."""
        items = [dict(memory) for memory in memories]
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "memories", "batch"),
                json={"memories": items},
                idempotent=all(
                    item.get("idempotency_key") is not None or item.get("key") is not None
                    for item in items
                ),
            )
        )

    def list_memory_users(self, app: str, *, limit: int | None = None) -> L:
        """The ids (``{"user_id"}``) of the app's users whose memory holds entries, in id
        order, across pages."""
        return self._many(Call("GET", path(app, "memory-users"), params=query(limit=limit)))

    def list_memories(
        self,
        app: str,
        user_id: str,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int | None = None,
        as_of: datetime | str | None = None,
        known_at: datetime | str | None = None,
    ) -> L:
        """The user's memories, newest first, across pages; ``filter``, ``as_of`` and
        ``known_at`` as in ``search_memory``. ``limit`` is the page size."""
        params = query(
            filter=json.dumps(filter, separators=(",", ":")) if filter is not None else None,
            limit=limit,
            as_of=instant(as_of),
            known_at=instant(known_at),
        )
        return self._many(Call("GET", user_path(app, user_id, "memories"), params=params))

    def get_memory(self, app: str, user_id: str, memory_id: str) -> D:
        return self._one(Call("GET", user_path(app, user_id, "memories", memory_id)))

    def memory_history(self, app: str, user_id: str, memory_id: str) -> D:
        """``{"versions": [...]}``: the versions of the memory's key, oldest valid first,
        each with its clocks and who wrote it."""
        return self._one(Call("GET", user_path(app, user_id, "memories", memory_id, "history")))

    def profile(
        self,
        app: str,
        user_id: str,
        prefixes: Sequence[str],
        *,
        max_fields: int | None = None,
        max_bytes: int | None = None,
    ) -> D:
        """The user's profile: the live keyed memories under ``prefixes`` (keys or key
        prefixes, 1 to 20), in key order: ``{"prefixes", "fields": [{"key", "value",
        "memory_id", "since"}], "text", "sha256", "bytes", "truncated"}``; ``text`` is the
        stable block (the same fields give the same bytes)."""
        params: dict[str, str | list[str]] = {"prefix": list(prefixes)}
        params.update(query(max_fields=max_fields, max_bytes=max_bytes))
        return self._one(Call("GET", user_path(app, user_id, "profile"), params=params))

    def rollback_memory(self, app: str, user_id: str, memory_id: str) -> D:
        """Restore the closed version ``memory_id`` as a new version of its key, valid from
        now: the new version. Not retried (a repeat would add another version)."""
        return self._one(Call("POST", user_path(app, user_id, "memories", memory_id, "rollback")))

    def touch_memories(self, app: str, user_id: str, ids: Sequence[str]) -> D:
        """Refresh the TTL of memories ``ids`` (at most 200): ``{"memories": [{"id",
        "expires_at"}]}``, the live ones with a TTL. Repeating it is harmless, so retried."""
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "memories", "touch"),
                json={"ids": list(ids)},
                idempotent=True,
            )
        )

    def delete_memory(self, app: str, user_id: str, memory_id: str) -> N:
        return self._none(Call("DELETE", user_path(app, user_id, "memories", memory_id)))

    def search_memory(
        self,
        app: str,
        user_id: str,
        query: str,
        *,
        mode: str | None = None,
        limit: int | None = None,
        filter: Mapping[str, Any] | None = None,
        min_score: float | None = None,
        as_of: datetime | str | None = None,
        known_at: datetime | str | None = None,
        **extra: Any,
    ) -> D:
        """Lexical, vector or hybrid search (``mode``) among the memories valid at
        ``as_of`` as known at ``known_at`` (each default now); ``extra``: ``weights``."""
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "memories", "search"),
                json=body(
                    query=query,
                    mode=mode,
                    limit=limit,
                    filter=filter,
                    min_score=min_score,
                    as_of=instant(as_of),
                    known_at=instant(known_at),
                    **extra,
                ),
                idempotent=True,
            )
        )

    def add_events_to_memory(
        self,
        app: str,
        user_id: str,
        events: Sequence[Mapping[str, Any]],
        *,
        session_id: str | None = None,
        **extra: Any,
    ) -> D:
        """Session events (their user and model text) to memories."""
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "memories", "events"),
                json=body(session_id=session_id, events=[dict(e) for e in events], **extra),
            )
        )

    def ingest_session(self, app: str, user_id: str, session_id: str, **extra: Any) -> D:
        """Admit the session's events to the durable outbox (``extra``: ``after_seq``,
        ``max_attempts``); the answer names the job."""
        return self._one(
            Call(
                "POST",
                user_path(app, user_id, "memories", "ingestions"),
                json=body(session_id=session_id, **extra),
            )
        )

    # ------------------------------------------------------------------ erasure
    def erase_session_memories(self, app: str, user_id: str, session_id: str) -> D:
        """Erase the memories drawn from one session (a receipt)."""
        return self._one(
            Call(
                "DELETE",
                user_path(app, user_id, "memories"),
                params=query(session_id=session_id),
            )
        )

    def erase_user_memories(self, app: str, user_id: str) -> D:
        """Erase the user's whole memory, sending the confirmation the API asks for (a
        receipt; the erasure epoch advances)."""
        return self._one(
            Call(
                "DELETE",
                user_path(app, user_id, "memories"),
                json={"confirm": f"erase user {user_id}"},
            )
        )

    def get_erasure_epoch(self, app: str, user_id: str) -> D:
        return self._one(Call("GET", user_path(app, user_id, "memories", "erasure-epoch")))

    # ------------------------------------------------------------------ governance
    def get_consent(self, app: str, user_id: str) -> D:
        return self._one(Call("GET", user_path(app, user_id, "memories", "consent")))

    def set_consent(self, app: str, user_id: str, *, granted: bool) -> D:
        return self._one(
            Call("PUT", user_path(app, user_id, "memories", "consent"), json={"granted": granted})
        )

    def get_legal_hold(self, app: str, user_id: str) -> D:
        return self._one(Call("GET", user_path(app, user_id, "memories", "legal-hold")))

    def place_legal_hold(self, app: str, user_id: str) -> D:
        """Place a legal hold (needs the ``admin`` scope)."""
        return self._one(Call("PUT", user_path(app, user_id, "memories", "legal-hold")))

    def release_legal_hold(self, app: str, user_id: str) -> N:
        """Release the legal hold (needs the ``admin`` scope)."""
        return self._none(Call("DELETE", user_path(app, user_id, "memories", "legal-hold")))

    def get_memory_policy(self, app: str) -> D:
        return self._one(Call("GET", path(app, "memory-policy")))

    def set_memory_policy(self, app: str, **policy: Any) -> D:
        """Set the app's memory governance policy (needs the ``admin`` scope)."""
        return self._one(Call("PUT", path(app, "memory-policy"), json=policy))

    # ------------------------------------------------------------------ outbox
    def get_job(self, app: str, job_id: str) -> D:
        """An ingestion job's content-free status."""
        return self._one(Call("GET", path(app, "outbox", "jobs", job_id)))

    def cancel_job(self, app: str, job_id: str) -> D:
        return self._one(Call("POST", path(app, "outbox", "jobs", job_id, "cancel")))

    def outbox_stats(self, app: str) -> D:
        return self._one(Call("GET", path(app, "outbox", "stats")))
