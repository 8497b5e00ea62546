"""Graph threads: LangGraph's checkpoints and pending writes (``ctxadmin_client.langgraph``
speaks these for its checkpoint saver)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._base import B, D, L, N, Runners
from ._calls import Call, body, path, query


def _filter(value: Mapping[str, Any] | None) -> str | None:
    return json.dumps(value, separators=(",", ":")) if value is not None else None


class ThreadOperations(Runners[D, L, N, B]):
    def put_checkpoint(
        self,
        app: str,
        thread_id: str,
        *,
        checkpoint_id: str,
        checkpoint: Mapping[str, str],
        channel_versions: Mapping[str, str],
        checkpoint_ns: str = "",
        parent_checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        blobs: Sequence[Mapping[str, str]] = (),
    ) -> D:
        """Store a checkpoint (``checkpoint``: ``{"type", "data_base64"}``) with the blobs
        of its new channel versions. A repeat replaces it, so it is retried."""
        return self._one(
            Call(
                "POST",
                path(app, "threads", thread_id, "checkpoints"),
                json=body(
                    checkpoint_ns=checkpoint_ns,
                    checkpoint_id=checkpoint_id,
                    parent_checkpoint_id=parent_checkpoint_id,
                    checkpoint=dict(checkpoint),
                    metadata=dict(metadata or {}),
                    channel_versions=dict(channel_versions),
                    blobs=[dict(b) for b in blobs],
                ),
                idempotent=True,
            )
        )

    def put_checkpoint_writes(
        self,
        app: str,
        thread_id: str,
        checkpoint_id: str,
        *,
        task_id: str,
        writes: Sequence[Mapping[str, Any]],
        checkpoint_ns: str = "",
        task_path: str = "",
    ) -> D:
        """Store a task's pending writes (``{"idx", "channel", "type", "data_base64"}``);
        a repeat changes nothing, so it is retried."""
        return self._one(
            Call(
                "POST",
                path(app, "threads", thread_id, "checkpoints", checkpoint_id, "writes"),
                json=body(
                    checkpoint_ns=checkpoint_ns,
                    task_id=task_id,
                    task_path=task_path,
                    writes=[dict(w) for w in writes],
                ),
                idempotent=True,
            )
        )

    def get_checkpoint(
        self, app: str, thread_id: str, checkpoint_id: str, *, checkpoint_ns: str = ""
    ) -> D:
        return self._one(
            Call(
                "GET",
                path(app, "threads", thread_id, "checkpoints", checkpoint_id),
                params=query(checkpoint_ns=checkpoint_ns),
            )
        )

    def list_thread_checkpoints(
        self,
        app: str,
        thread_id: str,
        *,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> L:
        """The thread's checkpoints, newest id first, across pages (``limit``: page size)."""
        params = query(
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            before=before,
            filter=_filter(filter),
            limit=limit,
        )
        return self._many(
            Call("GET", path(app, "threads", thread_id, "checkpoints"), params=params)
        )

    def list_checkpoints(
        self,
        app: str,
        *,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> L:
        """Every thread's checkpoints, newest id first, across pages."""
        params = query(
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            before=before,
            filter=_filter(filter),
            limit=limit,
        )
        return self._many(Call("GET", path(app, "checkpoints"), params=params))

    def delete_thread(self, app: str, thread_id: str) -> N:
        """Delete the thread with its checkpoints, blobs and writes."""
        return self._none(Call("DELETE", path(app, "threads", thread_id)))
