"""``CtxAdminSaver``: LangGraph's ``BaseCheckpointSaver`` on ctxadmin's graph threads.

A checkpoint goes to ``POST /threads/{thread}/checkpoints`` without its channel values, as
the bytes the saver's serializer makes (the server never reads them), with its metadata as
JSON (``list``'s ``filter`` compares it on the server) and its channel versions; each
channel whose version is new travels as a blob, which the server stores once per (thread,
namespace, channel, version). Pending writes go to ``.../checkpoints/{id}/writes``. Reads
answer a checkpoint with the blobs of its versions and its writes in one request.

The server keeps ``CTXADMIN_THREAD_CHECKPOINTS_KEEP`` checkpoints (100 by default) per
thread and namespace and prunes older ones on each put: the time travel this saver offers
reaches that far back.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

from ctxadmin_client import AsyncClient, Client, NotFoundError
from ctxadmin_client.langgraph._connection import Connection, Holding

#: Checkpoints asked for per page of a list.
PAGE_SIZE = 50
_EMPTY = ("empty", b"")


def _typed(value: tuple[str, bytes]) -> dict[str, str]:
    kind, data = value
    return {"type": kind, "data_base64": base64.b64encode(data).decode("ascii")}


def _untyped(item: Mapping[str, Any]) -> tuple[str, bytes]:
    return item["type"], base64.b64decode(item["data_base64"])


def _json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata as JSON (what ``list``'s filter compares on the server)."""
    return json.loads(json.dumps(metadata, default=str))


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


class CtxAdminSaver(Holding, BaseCheckpointSaver[str]):
    """LangGraph checkpoints kept in ctxadmin app ``app`` (default: the API key's own app,
    asked once; a key with the ``sessions`` scope). ``base_url``/``api_key`` (default
    ``CTXADMIN_URL``/``CTXADMIN_API_KEY``) make the clients, or pass ready ones as
    ``client`` (sync) and ``async_client``."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        app: str | None = None,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        serde: SerializerProtocol | None = None,
        **client_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        self._connection = Connection(
            base_url,
            api_key,
            app=app,
            client=client,
            async_client=async_client,
            **client_options,
        )
        self.app = self._connection.app

    # ------------------------------------------------------------------ the wire
    def _put_request(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[str, dict[str, Any]]:
        configurable = config["configurable"]
        stored = checkpoint.copy()
        values: dict[str, Any] = stored.pop("channel_values")  # type: ignore[misc]
        blobs = [
            {
                "channel": channel,
                "version": str(version),
                **_typed(self.serde.dumps_typed(values[channel]) if channel in values else _EMPTY),
            }
            for channel, version in new_versions.items()
        ]
        return configurable["thread_id"], {
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": configurable.get("checkpoint_id"),
            "checkpoint": _typed(self.serde.dumps_typed(stored)),
            "metadata": _json_metadata(get_checkpoint_metadata(config, metadata)),
            "channel_versions": {k: str(v) for k, v in stored["channel_versions"].items()},
            "blobs": blobs,
        }

    def _writes_request(
        self, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> dict[str, Any]:
        by_index: dict[int, dict[str, Any]] = {}
        for idx, (channel, value) in enumerate(writes):
            index = WRITES_IDX_MAP.get(channel, idx)
            by_index[index] = {
                "idx": index,
                "channel": channel,
                **_typed(self.serde.dumps_typed(value)),
            }
        return {"task_id": task_id, "task_path": task_path, "writes": list(by_index.values())}

    def _tuple(self, found: Mapping[str, Any]) -> CheckpointTuple:
        checkpoint: Checkpoint = self.serde.loads_typed(_untyped(found["checkpoint"]))
        versions = {k: str(v) for k, v in checkpoint.get("channel_versions", {}).items()}
        values = {
            blob["channel"]: self.serde.loads_typed(_untyped(blob))
            for blob in found["blobs"]
            if blob["type"] != "empty" and versions.get(blob["channel"]) == blob["version"]
        }
        thread_id, ns = found["thread_id"], found["checkpoint_ns"]
        parent = found.get("parent_checkpoint_id")
        return CheckpointTuple(
            config=_config(thread_id, ns, found["checkpoint_id"]),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=found["metadata"],
            parent_config=_config(thread_id, ns, parent) if parent else None,
            pending_writes=[
                (w["task_id"], w["channel"], self.serde.loads_typed(_untyped(w)))
                for w in found["writes"]
            ],
        )

    @staticmethod
    def _list_arguments(
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> dict[str, Any]:
        configurable = (config or {}).get("configurable", {})
        return {
            "checkpoint_ns": configurable.get("checkpoint_ns"),
            "checkpoint_id": configurable.get("checkpoint_id"),
            "before": get_checkpoint_id(before) if before else None,
            "filter": _json_metadata(filter) if filter else None,
            "limit": max(1, min(limit, PAGE_SIZE)) if limit is not None else PAGE_SIZE,
        }

    # ------------------------------------------------------------------ sync
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        ns = configurable.get("checkpoint_ns", "")
        client = self._connection.client
        if checkpoint_id := get_checkpoint_id(config):
            try:
                found = client.get_checkpoint(self.app, thread_id, checkpoint_id, checkpoint_ns=ns)
            except NotFoundError:
                return None
            return self._tuple(found)
        for found in client.list_thread_checkpoints(self.app, thread_id, checkpoint_ns=ns, limit=1):
            return self._tuple(found)
        return None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        arguments = self._list_arguments(config, filter, before, limit)
        client = self._connection.client
        if config is None:
            pages = client.list_checkpoints(self.app, **arguments)
        else:
            thread_id = config["configurable"]["thread_id"]
            pages = client.list_thread_checkpoints(self.app, thread_id, **arguments)
        for count, found in enumerate(pages, start=1):
            yield self._tuple(found)
            if limit is not None and count >= limit:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, body = self._put_request(config, checkpoint, metadata, new_versions)
        self._connection.client.put_checkpoint(self.app, thread_id, **body)
        return _config(thread_id, body["checkpoint_ns"], body["checkpoint_id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        self._connection.client.put_checkpoint_writes(
            self.app,
            configurable["thread_id"],
            configurable["checkpoint_id"],
            checkpoint_ns=configurable.get("checkpoint_ns", ""),
            **self._writes_request(writes, task_id, task_path),
        )

    def delete_thread(self, thread_id: str) -> None:
        self._connection.client.delete_thread(self.app, thread_id)

    # ------------------------------------------------------------------ async
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        ns = configurable.get("checkpoint_ns", "")
        client = self._connection.async_client
        if checkpoint_id := get_checkpoint_id(config):
            try:
                found = await client.get_checkpoint(
                    self.app, thread_id, checkpoint_id, checkpoint_ns=ns
                )
            except NotFoundError:
                return None
            return self._tuple(found)
        async for found in client.list_thread_checkpoints(
            self.app, thread_id, checkpoint_ns=ns, limit=1
        ):
            return self._tuple(found)
        return None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        arguments = self._list_arguments(config, filter, before, limit)
        client = self._connection.async_client
        if config is None:
            pages = client.list_checkpoints(self.app, **arguments)
        else:
            thread_id = config["configurable"]["thread_id"]
            pages = client.list_thread_checkpoints(self.app, thread_id, **arguments)
        count = 0
        async for found in pages:
            yield self._tuple(found)
            count += 1
            if limit is not None and count >= limit:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, body = self._put_request(config, checkpoint, metadata, new_versions)
        await self._connection.async_client.put_checkpoint(self.app, thread_id, **body)
        return _config(thread_id, body["checkpoint_ns"], body["checkpoint_id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        await self._connection.async_client.put_checkpoint_writes(
            self.app,
            configurable["thread_id"],
            configurable["checkpoint_id"],
            checkpoint_ns=configurable.get("checkpoint_ns", ""),
            **self._writes_request(writes, task_id, task_path),
        )

    async def adelete_thread(self, thread_id: str) -> None:
        await self._connection.async_client.delete_thread(self.app, thread_id)

    # ------------------------------------------------------------------ versions
    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions as strings that sort as they grow (as LangGraph's own savers make them):
        the count, zero-padded, and a random fraction. The fraction matters here: blobs are
        stored once per version, and a branch forked from an older checkpoint counts the same
        numbers again for other values."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{uuid.uuid4().int % 10**16:016}"
