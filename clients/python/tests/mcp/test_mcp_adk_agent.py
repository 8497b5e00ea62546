"""A real ADK ``LlmAgent`` with ``McpToolset`` pointed at ctxadmin's ``/mcp``, under a user
token minted for the run, and a scripted model (no network): it stores a memory in one
session and finds it in another."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator

from ctxadmin_client import Client
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.mcp_tool import McpToolset, StreamableHTTPConnectionParams
from google.genai import types

USER = "alice"


def _call(name: str, **args) -> LlmResponse:
    part = types.Part(function_call=types.FunctionCall(name=name, args=args))
    return LlmResponse(content=types.Content(role="model", parts=[part]))


class ScriptedLlm(BaseLlm):
    """Calls the script's tools in order; after a tool answer, says what the answer held."""

    model: str = "scripted"
    calls: list[LlmResponse]
    tool_names: list[list[str]] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.tool_names.append(sorted(llm_request.tools_dict))
        last = llm_request.contents[-1]
        answers = [p.function_response for p in last.parts or [] if p.function_response]
        if answers:
            text = json.dumps(answers[0].response, default=str)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
            return
        yield self.calls.pop(0)


async def _turn(runner: Runner, sessions, session_id: str, text: str) -> str:
    await sessions.create_session(app_name=runner.app_name, user_id=USER, session_id=session_id)
    message = types.Content(role="user", parts=[types.Part(text=text)])
    final = ""
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        if event.content and event.content.parts and event.content.parts[0].text:
            final = event.content.parts[0].text
    return final


def test_an_adk_agent_stores_a_memory_in_one_session_and_finds_it_in_another(make_app):
    app = make_app(scopes=("memory", "delegate"))
    with Client(app.base_url, api_key=app.key) as client:
        token = client.mint_user_token(
            app.name, USER, capabilities=["memory_search", "memory_add"], label="adk run"
        )["token"]

    async def scenario() -> tuple[str, str, list]:
        toolset = McpToolset(
            connection_params=StreamableHTTPConnectionParams(
                url=f"{app.base_url}/mcp", headers={"Authorization": f"Bearer {token}"}
            )
        )
        model = ScriptedLlm(
            calls=[
                _call("memory_add", content="Alice's cat is called Miso."),
                _call("memory_search", query="cat", mode="lexical"),
            ]
        )
        agent = LlmAgent(name="assistant", model=model, tools=[toolset])
        sessions = InMemorySessionService()
        runner = Runner(app_name=app.name, agent=agent, session_service=sessions)
        try:
            stored = await _turn(runner, sessions, "monday", "Remember my cat is Miso.")
            found = await _turn(runner, sessions, "tuesday", "What is my cat called?")
        finally:
            await toolset.close()
        return stored, found, model.tool_names

    stored, found, tool_names = asyncio.run(scenario())
    assert '"created": true' in stored
    assert "Alice's cat is called Miso." in found
    assert "untrusted" in found
    # The token's capabilities are all the model ever saw.
    assert all(names == ["memory_add", "memory_history", "memory_search"] for names in tool_names)
