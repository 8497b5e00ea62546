"""A real compiled ``StateGraph`` with ctxadmin as its checkpointer and its store: it runs,
stops at an ``interrupt``, resumes from ctxadmin after a restart (new saver, store and
compiled graph, as a new process would have) and reads back the memory it wrote; its
states and history match the same graph on LangGraph's in-memory saver and store. The
"model" is a scripted function: no network."""

from __future__ import annotations

import operator
import re
import sys
import types
import uuid
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from ctxadmin_client.langgraph import CtxAdminSaver, CtxAdminStore
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, interrupt


class State(TypedDict):
    user: str
    messages: Annotated[list[str], operator.add]
    approved: bool


def scripted_model(messages: list[str], recalled: list[str]) -> str:
    known = f" (I remember: {'; '.join(recalled)})" if recalled else ""
    return f"Booking a seat for: {messages[-1]}{known}"


def recall(state: State) -> dict:
    items = get_store().search((state["user"], "memories"), limit=10)
    recalled = sorted(item.value["text"] for item in items)
    return {"messages": [scripted_model(state["messages"], recalled)]}


def approve(state: State) -> dict:
    answer = interrupt({"question": "Book it?", "draft": state["messages"][-1]})
    return {"approved": answer == "yes", "messages": [f"human said {answer}"]}


def remember(state: State) -> dict:
    if state["approved"]:
        get_store().put((state["user"], "memories"), "seat", {"text": "prefers a window seat"})
    return {"messages": ["done"]}


def build():
    builder = StateGraph(State)
    builder.add_node("recall", recall)
    builder.add_node("approve", approve)
    builder.add_node("remember", remember)
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "approve")
    builder.add_edge("approve", "remember")
    builder.add_edge("remember", END)
    return builder


def run_script(make_saver, make_store, thread: str, user: str) -> dict:
    """Run, stop at the interrupt, restart, resume, run a second turn; what was seen."""
    seen: dict = {}
    config = {"configurable": {"thread_id": thread}}
    saver, store = make_saver(), make_store()
    graph = build().compile(checkpointer=saver, store=store)
    first = graph.invoke({"user": user, "messages": ["window seat to Lisbon"]}, config)
    seen["interrupt"] = [i.value for i in first["__interrupt__"]]
    seen["paused_next"] = graph.get_state(config).next
    # The restart: nothing of the first process is reused.
    saver, store = make_saver(), make_store()
    graph = build().compile(checkpointer=saver, store=store)
    assert graph.get_state(config).next == ("approve",)
    done = graph.invoke(Command(resume="yes"), config)
    seen["after_resume"] = done
    seen["memory"] = store.get((user, "memories"), "seat").value
    # A second turn recalls the memory the first one wrote.
    again = graph.invoke({"messages": ["and the return flight"]}, config)
    graph.invoke(Command(resume="no"), config)
    seen["second_turn"] = again["messages"]
    seen["final"] = graph.get_state(config).values
    seen["history"] = [
        (snapshot.next, snapshot.metadata["step"], snapshot.metadata["source"])
        for snapshot in graph.get_state_history(config)
    ]
    return seen


def test_a_compiled_graph_interrupts_resumes_after_a_restart_and_reads_its_memory(app):
    user = f"traveller-{uuid.uuid4().hex[:8]}"
    thread = f"trip-{uuid.uuid4().hex[:8]}"
    opened: list = []

    def saver():
        made = CtxAdminSaver(app.base_url, app.key, app=app.name)
        opened.append(made)
        return made

    def store():
        made = CtxAdminStore(app.base_url, app.key, app=app.name)
        opened.append(made)
        return made

    try:
        mine = run_script(saver, store, thread, user)
    finally:
        for made in opened:
            made.close()
    memory_saver, memory_store = InMemorySaver(), InMemoryStore()
    theirs = run_script(lambda: memory_saver, lambda: memory_store, thread, user)
    assert mine["interrupt"] == [
        {"question": "Book it?", "draft": "Booking a seat for: window seat to Lisbon"}
    ]
    assert mine["memory"] == {"text": "prefers a window seat"}
    assert "I remember: prefers a window seat" in mine["second_turn"][-1]
    assert mine == theirs


@pytest.mark.anyio
async def test_the_async_path_runs_and_resumes(app):
    user = f"traveller-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": f"trip-{uuid.uuid4().hex[:8]}"}}
    async with CtxAdminSaver(app.base_url, app.key, app=app.name) as saver:
        async with CtxAdminStore(app.base_url, app.key, app=app.name) as store:
            graph = build().compile(checkpointer=saver, store=store)
            first = await graph.ainvoke({"user": user, "messages": ["aisle seat"]}, config)
            assert first["__interrupt__"]
    async with CtxAdminSaver(app.base_url, app.key, app=app.name) as saver:
        async with CtxAdminStore(app.base_url, app.key, app=app.name) as store:
            graph = build().compile(checkpointer=saver, store=store)
            done = await graph.ainvoke(Command(resume="yes"), config)
            assert done["approved"] is True and done["messages"][-1] == "done"
            assert (await store.aget((user, "memories"), "seat")).value == {
                "text": "prefers a window seat"
            }


README = Path(__file__).resolve().parents[4] / "README.md"


def test_the_readme_quickstart_works(make_app, monkeypatch):
    """The README's LangGraph block, with this stack's address, key and app in place."""
    found = re.search(r"### LangGraph.*?```python\n(.*?)```", README.read_text("utf-8"), re.S)
    assert found, "the README has no LangGraph quickstart"
    app = make_app()
    code = (
        found.group(1)
        .replace("http://127.0.0.1:8000", app.base_url)
        .replace('"ctx_..."', repr(app.key))
        .replace('"demo"', repr(app.name))
    )
    monkeypatch.setenv("CTXADMIN_URL", app.base_url)
    monkeypatch.setenv("CTXADMIN_API_KEY", app.key)
    printed: list = []
    # A module of its own: LangGraph reads the state's type hints from the class's module.
    module = types.ModuleType("langgraph_readme_quickstart")
    module.print = printed.append
    sys.modules[module.__name__] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the README's own lines
    finally:
        del sys.modules[module.__name__]
    state, memory = printed
    assert state == {"user": "alice", "notes": ["hello", "remembered"]}
    assert memory == {"text": "prefers window seats"}
