"""Google ADK on ctxadmin: a Runner whose sessions, memory and artifacts live in ctxadmin and
whose every model request is built by ctxadmin's context builder (bounded, secret-free, with
the user's memories, compacted on the server when over budget).

    CTXADMIN_URL=http://127.0.0.1:8000 CTXADMIN_API_KEY=ctx_... CTXADMIN_APP=demo \\
        python clients/python/examples/adk_runner.py

The key needs the ``sessions`` and ``memory`` scopes of the app ``CTXADMIN_APP``. The model
is scripted (no model provider, no network beyond ctxadmin): it prints what each request
holds and answers from its script. Needs ``pip install 'ctxadmin-client[adk]'``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncGenerator

from ctxadmin_client.adk import (
    CtxAdminArtifactService,
    CtxAdminContextPlugin,
    CtxAdminMemoryService,
    CtxAdminSessionService,
)
from google.adk.agents import LlmAgent
from google.adk.apps.app import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types


class ScriptedModel(BaseLlm):
    """A stand-in for Gemini: answers in turn from ``answers`` and keeps every request."""

    model: str = "scripted"
    answers: list[str]
    requests: list[LlmRequest] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        texts = [part.text for c in llm_request.contents for part in c.parts or () if part.text]
        print(f"  model request: {len(llm_request.contents)} contents, last: {texts[-1]!r}")
        answer = self.answers.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=answer)]))


def message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def run(base_url: str, api_key: str, app: str, user: str = "ada") -> ScriptedModel:
    model = ScriptedModel(
        answers=[
            "Noted: you take your coffee black.",
            "Black, as you told me last time.",
        ]
    )
    context = CtxAdminContextPlugin(
        base_url,
        api_key,
        # The history within 4,000 tokens; over that, ctxadmin compacts the session first.
        policy={"budgets": {"max_tokens": 4000}, "overflow": "compress"},
        # Up to 3 of the user's memories, found with the current input as the query.
        memory={"mode": "hybrid", "limit": 3, "on_error": "omit"},
    )
    sessions = CtxAdminSessionService(base_url, api_key)
    memory = CtxAdminMemoryService(base_url, api_key)
    artifacts = CtxAdminArtifactService(base_url, api_key)
    agent = LlmAgent(name="barista", model=model, instruction="Remember the guest's taste.")
    runner = Runner(
        app=App(name=app, root_agent=agent, plugins=[context]),
        session_service=sessions,
        memory_service=memory,
        artifact_service=artifacts,
    )
    try:
        first = await sessions.create_session(app_name=app, user_id=user)
        print(f"session {first.id}")
        async for event in runner.run_async(
            user_id=user, session_id=first.id, new_message=message("I take my coffee black.")
        ):
            if event.content and event.content.parts and event.content.parts[0].text:
                print(f"  {event.author}: {event.content.parts[0].text}")
        stored = await sessions.get_session(app_name=app, user_id=user, session_id=first.id)
        await memory.add_session_to_memory(stored)

        second = await sessions.create_session(app_name=app, user_id=user)
        print(f"session {second.id} (a new conversation; the memory is recalled)")
        async for event in runner.run_async(
            user_id=user, session_id=second.id, new_message=message("How do I take my coffee?")
        ):
            if event.content and event.content.parts and event.content.parts[0].text:
                print(f"  {event.author}: {event.content.parts[0].text}")
        print(f"last context build: {context.last_accounting}")
    finally:
        await runner.close()
        for service in (sessions, memory, artifacts):
            await service.close()
    return model


def main() -> None:
    base_url = os.environ["CTXADMIN_URL"]
    api_key = os.environ["CTXADMIN_API_KEY"]
    app = os.environ.get("CTXADMIN_APP", "demo")
    asyncio.run(run(base_url, api_key, app, user=f"guest-{uuid.uuid4().hex[:8]}"))


if __name__ == "__main__":
    main()
