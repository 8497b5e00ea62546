"""``CtxAdminContextPlugin``: each model call of an ADK ``Runner`` gets ctxadmin's context.

Before every model call the plugin asks ctxadmin (``POST .../context``) for the request's
contents: the session's history as ctxadmin selects it (compaction checkpoints instead of the
events they cover, secrets pruned, within the policy's byte and token budgets), the user's
memory hits when a ``memory`` retrieval is set, and the current input (the newest user turn).
With ``"overflow": "compress"`` in the policy, a history over budget is compacted on the
server there and then. ADK's own system instruction, tools and generation config are left as
they are. The session must be stored in ctxadmin (``CtxAdminSessionService``).
"""

from __future__ import annotations

from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from ctxadmin_client.adk import _wire
from ctxadmin_client.adk._compactions import take_server_compactions
from ctxadmin_client.adk._connection import Connection


def _wire_content(content: types.Content) -> dict[str, Any]:
    return content.model_dump(mode="json", exclude_none=True)


def newest_user_turn(session_events: list, fallback: types.Content | None):
    """The newest event a user wrote with content (its id and content); ``fallback`` (the
    invocation's user content) when there is none."""
    for event in reversed(session_events):
        if event.author == "user" and event.content and event.content.parts:
            return event.id, event.content
    return None, fallback


def contents_from(envelope: dict[str, Any], current_event_id: str | None) -> list[types.Content]:
    """The model request's contents: memory first, then the history; the current input last
    unless the history already holds it (the runner stores the user's turn before the call)."""
    contents = [types.Content.model_validate(item["content"]) for item in envelope["memory"]]
    history = envelope["history"]
    contents.extend(
        types.Content.model_validate(item["content"]) for item in history if item.get("content")
    )
    if current_event_id is None or all(
        item.get("event_id") != current_event_id for item in history
    ):
        contents.append(types.Content.model_validate(envelope["current_input"]))
    return contents


class CtxAdminContextPlugin(BasePlugin):
    """Builds every model request's contents through ctxadmin.

    ``policy``: a context policy (filters, ``budgets``, ``overflow``: ``error``, ``truncate``
    or ``compress``); ``memory``: a memory retrieval (``mode``, ``limit``, ``max_hit_bytes``,
    ``max_total_bytes``, ``on_error``; its query defaults to the current input's text).
    The connection is given as to the services: ``(base_url, api_key)`` or ``client=``.
    """

    def __init__(
        self,
        base_url: Any = None,
        api_key: str | None = None,
        *,
        policy: dict[str, Any] | None = None,
        memory: dict[str, Any] | None = None,
        name: str = "ctxadmin_context",
        **connection: Any,
    ) -> None:
        super().__init__(name=name)
        self._connection = Connection(base_url, api_key, **connection)
        self.policy = policy
        self.memory = memory
        #: The accounting of the last build (events selected, dropped, bytes, compaction).
        self.last_accounting: dict[str, Any] | None = None

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        session = callback_context.session
        event_id, current = newest_user_turn(session.events, callback_context.user_content)
        if current is None:
            if not llm_request.contents:
                return None
            current = llm_request.contents[-1]
        memory = dict(self.memory) if self.memory is not None else None
        if memory is not None and "query" not in memory:
            text = " ".join(part.text for part in current.parts or () if part.text).strip()
            memory["query"] = text or " "
        answer = await self._connection.client.build_context(
            self._connection.app_for(session.app_name),
            session.user_id,
            _wire.session_id(session.id),
            current_input=_wire_content(current),
            policy=self.policy,
            memory=memory,
        )
        self.last_accounting = answer.get("accounting") or {}
        if self.last_accounting.get("compaction_id"):
            # The summary it stored advanced the session: the Runner's session takes it.
            await take_server_compactions(
                self._connection.client, self._connection.app_for(session.app_name), session
            )
        llm_request.contents = contents_from(answer["envelope"], event_id)
        return None

    async def close(self) -> None:
        await self._connection.close()
