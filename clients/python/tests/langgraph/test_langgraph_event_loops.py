"""One ``CtxAdminSaver`` and one ``CtxAdminStore`` serve a compiled graph's ``ainvoke`` from
consecutive ``asyncio.run`` calls and from several threads at once (each with its own event
loop), as a script or a worker pool uses them."""

from __future__ import annotations

import asyncio
import operator
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, TypedDict

from ctxadmin_client.langgraph import CtxAdminSaver, CtxAdminStore
from langgraph.config import get_store
from langgraph.graph import START, StateGraph


class State(TypedDict):
    user: str
    notes: Annotated[list[str], operator.add]


async def note(state: State) -> dict:
    store = get_store()
    count = len(await store.asearch((state["user"], "notes"), limit=50))
    await store.aput((state["user"], "notes"), f"n{count}", {"text": state["notes"][-1]})
    return {"notes": [f"kept {count + 1}"]}


def within(awaitable, seconds: float = 60):
    """Run to its end on a new loop, or fail (a client bound to another loop can hang)."""

    async def bounded():
        return await asyncio.wait_for(awaitable, seconds)

    return asyncio.run(bounded())


def build(saver: CtxAdminSaver, store: CtxAdminStore):
    builder = StateGraph(State)
    builder.add_node("note", note)
    builder.add_edge(START, "note")
    return builder.compile(checkpointer=saver, store=store)


def test_a_graph_on_one_saver_and_store_across_asyncio_runs(app, user):
    saver = CtxAdminSaver(app.base_url, app.key, app=app.name)
    store = CtxAdminStore(app.base_url, app.key, app=app.name)
    graph = build(saver, store)
    config = {"configurable": {"thread_id": f"loops-{uuid.uuid4().hex[:8]}"}}
    for turn in range(3):
        out = within(graph.ainvoke({"user": user, "notes": [f"turn {turn}"]}, config))
        assert out["notes"][-1] == f"kept {turn + 1}"

    async def read():
        state = await graph.aget_state(config)
        return state.values["notes"], await store.asearch((user, "notes"), limit=50)

    notes, items = asyncio.run(read())
    assert notes == ["turn 0", "kept 1", "turn 1", "kept 2", "turn 2", "kept 3"]
    assert sorted(item.key for item in items) == ["n0", "n1", "n2"]
    saver.close()
    store.close()


def test_a_graph_on_one_saver_and_store_from_threads_at_once(app, user):
    saver = CtxAdminSaver(app.base_url, app.key, app=app.name)
    store = CtxAdminStore(app.base_url, app.key, app=app.name)
    graph = build(saver, store)
    start = threading.Barrier(6)
    base = uuid.uuid4().hex[:8]

    def worker(n: int) -> list[str]:
        config = {"configurable": {"thread_id": f"loops-{base}-{n}"}}
        start.wait()
        for turn in range(2):
            within(graph.ainvoke({"user": f"{user}-{n}", "notes": [f"t{turn}"]}, config))
        return within(graph.aget_state(config)).values["notes"]

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(worker, range(6)))
    assert answers == [["t0", "kept 1", "t1", "kept 2"]] * 6

    async def put_and_get(n: int):
        await store.aput((f"{user}-{n}", "direct"), "k", {"v": n})
        return (await store.aget((f"{user}-{n}", "direct"), "k")).value

    with ThreadPoolExecutor(6) as pool:
        values = list(pool.map(lambda n: within(put_and_get(n)), range(6)))
    assert values == [{"v": n} for n in range(6)]
    saver.close()
    store.close()
