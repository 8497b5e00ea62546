"""``CtxAdminSaver`` beside LangGraph's own ``InMemorySaver``: the same generated sequences of
puts, writes, reads, lists and thread deletions (sync, and async on the a* methods) answer
the same checkpoint tuples; blobs are stored once per channel version; the server's pruning
bounds a thread's history."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from ctxadmin_client import Client
from ctxadmin_client.langgraph import CtxAdminSaver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import LATEST_VERSION, Checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver

THREADS = ("t1", "t2")
NAMESPACES = ("", "inner:1")
CHANNELS = ("messages", "count", "route")
VALUES = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=8),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(("a", "b")), st.booleans(), max_size=2),
)

put_op = st.tuples(
    st.just("put"),
    st.sampled_from(THREADS),
    st.sampled_from(NAMESPACES),
    st.dictionaries(st.sampled_from(CHANNELS), VALUES, max_size=3),
    st.sampled_from(("loop", "input", "update")),
)
writes_op = st.tuples(
    st.just("writes"),
    st.sampled_from(THREADS),
    st.sampled_from(NAMESPACES),
    st.integers(0, 5),  # which checkpoint (by position) of the thread and namespace
    st.sampled_from(("task-a", "task-b")),
    st.lists(
        st.tuples(st.sampled_from((*CHANNELS, "__error__", "__interrupt__")), VALUES),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from(("", "~a", "~b")),
)
get_op = st.tuples(
    st.just("get"),
    st.sampled_from(THREADS),
    st.sampled_from(NAMESPACES),
    st.one_of(st.none(), st.integers(0, 5)),
)
list_op = st.tuples(
    st.just("list"),
    st.one_of(st.none(), st.sampled_from(THREADS)),
    st.one_of(st.none(), st.sampled_from(NAMESPACES)),
    st.one_of(st.none(), st.sampled_from(({"source": "loop"}, {"step": 1}, {"absent": None}))),
    st.one_of(st.none(), st.integers(0, 5)),  # before: the checkpoint at this position
    st.one_of(st.none(), st.integers(0, 4)),  # limit
)
delete_op = st.tuples(st.just("delete"), st.sampled_from(THREADS))
OPERATIONS = st.lists(
    st.one_of(put_op, put_op, writes_op, get_op, list_op, delete_op), min_size=1, max_size=14
)


def comparable(found: Any) -> Any:
    """A checkpoint tuple as plain data (configs, checkpoint, metadata, pending writes)."""
    if found is None:
        return None
    return (
        found.config,
        found.checkpoint,
        found.metadata,
        found.parent_config,
        [tuple(w) for w in found.pending_writes or []],
    )


class Runner:
    """One operation sequence, applied to a saver by its sync or its async methods."""

    def __init__(self, saver, prefix: str, mode: str) -> None:
        self.saver, self.prefix, self.mode = saver, prefix, mode
        self.versions = itertools.count(1)
        self.made: dict[tuple[str, str], list[str]] = {}
        self.current: dict[tuple[str, str], dict[str, str]] = {}

    def thread(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    async def call(self, name: str, *args, **kwargs):
        if self.mode == "async":
            method = getattr(self.saver, f"a{name}")
            if name == "list":
                return [item async for item in method(*args, **kwargs)]
            return await method(*args, **kwargs)
        result = getattr(self.saver, name)(*args, **kwargs)
        return list(result) if name == "list" else result

    def position(self, thread: str, ns: str, index: int | None) -> str | None:
        made = self.made.get((thread, ns), [])
        return made[index % len(made)] if made and index is not None else None

    async def run(self, operations, ids) -> list[Any]:
        answers = []
        next_id = iter(ids)
        for op in operations:
            kind = op[0]
            if kind == "put":
                _, thread, ns, values, source = op
                key = (thread, ns)
                versions = dict(self.current.get(key, {}))
                new_versions = {}
                for channel in values:
                    new_versions[channel] = f"{next(self.versions):032}.0"
                    versions[channel] = new_versions[channel]
                self.current[key] = versions
                made = self.made.setdefault(key, [])
                config = {
                    "configurable": {
                        "thread_id": self.thread(thread),
                        "checkpoint_ns": ns,
                        **({"checkpoint_id": made[-1]} if made else {}),
                    }
                }
                checkpoint = Checkpoint(
                    v=LATEST_VERSION,
                    id=next(next_id),
                    ts=datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
                    channel_values=dict(values),
                    channel_versions=versions,
                    versions_seen={"node": dict(versions)},
                    pending_sends=[],
                    updated_channels=sorted(values),
                )
                metadata = {"source": source, "step": len(made), "parents": {}}
                answers.append(await self.call("put", config, checkpoint, metadata, new_versions))
                made.append(checkpoint["id"])
            elif kind == "writes":
                _, thread, ns, index, task, writes, task_path = op
                checkpoint_id = self.position(thread, ns, index) or "1f0-unknown"
                config = {
                    "configurable": {
                        "thread_id": self.thread(thread),
                        "checkpoint_ns": ns,
                        "checkpoint_id": checkpoint_id,
                    }
                }
                await self.call("put_writes", config, writes, task, task_path)
            elif kind == "get":
                _, thread, ns, index = op
                configurable = {"thread_id": self.thread(thread), "checkpoint_ns": ns}
                if (checkpoint_id := self.position(thread, ns, index)) is not None:
                    configurable["checkpoint_id"] = checkpoint_id
                answers.append(
                    comparable(await self.call("get_tuple", {"configurable": configurable}))
                )
            elif kind == "list":
                _, thread, ns, filter, before_index, limit = op
                if thread is None:
                    ns, limit = None, None  # every thread: compared as a set below
                config = None
                if thread is not None:
                    configurable = {"thread_id": self.thread(thread)}
                    if ns is not None:
                        configurable["checkpoint_ns"] = ns
                    config = {"configurable": configurable}
                if ns is None:
                    limit = None  # several namespaces: LangGraph's order is by namespace
                before_id = self.position(thread or "t1", ns or "", before_index)
                before = {"configurable": {"checkpoint_id": before_id}} if before_id else None
                found = await self.call("list", config, filter=filter, before=before, limit=limit)
                mine = [comparable(item) for item in found]
                if thread is None:
                    # Only this example's threads (the app holds earlier examples' too).
                    mine = [
                        c for c in mine if c[0]["configurable"]["thread_id"].startswith(self.prefix)
                    ]
                if ns is None:
                    mine.sort(key=lambda c: repr(c))
                answers.append(mine)
            else:
                await self.call("delete_thread", self.thread(op[1]))
                self.made = {k: v for k, v in self.made.items() if k[0] != op[1]}
                self.current = {k: v for k, v in self.current.items() if k[0] != op[1]}
        return answers


@pytest.fixture(scope="module")
def saver(app):
    with CtxAdminSaver(app.base_url, app.key, app=app.name) as made:
        yield made


@pytest.mark.parametrize("mode", ["sync", "async"])
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=OPERATIONS)
def test_the_saver_answers_as_langgraphs_in_memory_saver(saver, mode, operations):
    prefix = uuid.uuid4().hex[:12]
    ids = [str(uuid6(clock_seq=n)) for n in range(len(operations))]
    reference = asyncio.run(Runner(InMemorySaver(), prefix, mode).run(operations, ids))
    if mode == "async":
        # A fresh AsyncClient per event loop (each example runs in its own).
        async def run():
            async with CtxAdminSaver(
                saver._connection._base_url, saver._connection._api_key, app=saver.app
            ) as fresh:
                return await Runner(fresh, prefix, mode).run(operations, ids)

        mine = asyncio.run(run())
    else:
        mine = asyncio.run(Runner(saver, prefix, mode).run(operations, ids))
    assert mine == reference


def test_blobs_are_stored_once_per_channel_version(app):
    with CtxAdminSaver(app.base_url, app.key, app=app.name) as saver:
        thread = f"blobs-{uuid.uuid4().hex[:8]}"
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        big = "x" * 50_000
        versions = {"document": "1", "turn": "1"}
        stored = []
        for turn in range(3):
            checkpoint = Checkpoint(
                v=LATEST_VERSION,
                id=str(uuid6(clock_seq=turn)),
                ts=datetime.now(UTC).isoformat(),
                channel_values={"document": big, "turn": turn},
                channel_versions=dict(versions),
                versions_seen={},
                pending_sends=[],
                updated_channels=None,
            )
            new = (
                {"document": "1", "turn": versions["turn"]}
                if turn == 0
                else {"turn": versions["turn"]}
            )
            config = saver.put(config, checkpoint, {"step": turn}, new)
            stored.append(config)
            versions["turn"] = str(turn + 2)
        with Client(app.base_url, app.key) as client:
            answers = list(client.list_thread_checkpoints(app.name, thread))
        assert len(answers) == 3
        # Each answer carries the big channel, but the thread stored it once: the newest
        # checkpoint names version 1 of "document", put with the first.
        for found in answers:
            assert [b["version"] for b in found["blobs"] if b["channel"] == "document"] == ["1"]
        oldest = saver.get_tuple(stored[0])
        newest = saver.get_tuple(stored[-1])
        assert oldest.checkpoint["channel_values"] == {"document": big, "turn": 0}
        assert newest.checkpoint["channel_values"] == {"document": big, "turn": 2}
        saver.delete_thread(thread)
        assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
