"""CtxAdminContextPlugin: a Runner's model requests are ctxadmin's context builds. The
example (clients/python/examples/adk_runner.py) runs as documented, and its model sees the
memory ctxadmin recalled and the current input once, last; a history over budget is
compacted on the server and the Runner keeps appending."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from ctxadmin_client.adk import CtxAdminContextPlugin, CtxAdminSessionService
from ctxadmin_client.adk.plugin import contents_from
from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.runners import Runner
from google.genai import types

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adk_runner.py"


def load_example():
    spec = importlib.util.spec_from_file_location("adk_runner_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the model's annotations through it
    spec.loader.exec_module(module)
    return module


def texts(contents: list[types.Content]) -> list[str]:
    return [part.text for content in contents for part in content.parts or () if part.text]


async def test_the_example_runs_and_its_model_sees_ctxadmins_context(make_app, user):
    app = make_app(name=f"barista-{user[-8:]}", scopes=("sessions", "memory"))
    example = load_example()
    model = await example.run(app.base_url, app.key, app.name, user=user)
    first, second = model.requests
    assert texts(first.contents) == ["I take my coffee black."]
    recalled = texts(second.contents)
    assert recalled[-1] == "How do I take my coffee?"
    assert recalled.count("How do I take my coffee?") == 1
    memory_blocks = [text for text in recalled if "It is untrusted" in text]
    assert any("I take my coffee black." in block for block in memory_blocks)
    assert second.config.system_instruction  # ADK's own instruction is left in place


def test_the_current_input_is_added_only_when_the_history_lacks_it():
    turn = {"role": "user", "parts": [{"text": "now"}]}
    envelope = {
        "memory": [],
        "history": [
            {"event_id": "e1", "content": {"role": "user", "parts": [{"text": "before"}]}},
            {"event_id": "e2", "content": turn},
        ],
        "current_input": turn,
    }
    assert texts(contents_from(envelope, "e2")) == ["before", "now"]
    assert texts(contents_from(envelope, None)) == ["before", "now", "now"]
    envelope["history"] = envelope["history"][:1]
    assert texts(contents_from(envelope, "e2")) == ["before", "now"]


async def test_a_history_over_budget_is_compacted_on_the_server_before_the_call(make_app, user):
    example = load_example()
    app = make_app(name=f"long-{user[-8:]}", scopes=("sessions",))
    words = "the traveller asked about the night train timetable and the sleeper cabins "
    model = example.ScriptedModel(answers=[f"Answer {n}: {words * 6}" for n in range(6)])
    plugin = CtxAdminContextPlugin(
        app.base_url,
        app.key,
        policy={"budgets": {"max_tokens": 800}, "overflow": "compress"},
    )
    sessions = CtxAdminSessionService(app.base_url, app.key)
    runner = Runner(
        app=App(name=app.name, root_agent=LlmAgent(name="guide", model=model), plugins=[plugin]),
        session_service=sessions,
    )
    builds = []
    try:
        session = await sessions.create_session(app_name=app.name, user_id=user)
        # Compaction keeps the last exchange raw (and, always, the last two user turns).
        await sessions.client.set_session_compaction_policy(
            app.name, user, session.id, retain_recent_exchanges=1, automatic=False
        )
        for n in range(6):
            async for _event in runner.run_async(
                user_id=user,
                session_id=session.id,
                new_message=example.message(f"Question {n}: {words * 6}"),
            ):
                pass
            builds.append(plugin.last_accounting)
    finally:
        await runner.close()
        await sessions.close()
    compacted = [build for build in builds if build.get("compaction_id")]
    assert compacted, builds
    last = model.requests[-1]
    assert texts(last.contents)[-1].startswith("Question 5:")
    assert len(last.contents) < 2 * 6  # the older turns are a checkpoint's summary now
