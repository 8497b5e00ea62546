"""Input ctxadmin refuses raises ADK's ``InputValidationError`` from every ADK service, and it
is the client's ``ValidationError`` too (its code and details kept); a user id holding a
``/`` is refused as the README says (400 ``invalid_path_parameter``), not missing."""

from __future__ import annotations

import pytest
from ctxadmin_client import ValidationError
from google.adk.errors.input_validation_error import InputValidationError
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.genai import types

pytestmark = pytest.mark.anyio


def refused(caught: pytest.ExceptionInfo, parameter: str | None = None) -> None:
    assert isinstance(caught.value, InputValidationError)
    assert isinstance(caught.value, ValidationError) and caught.value.status == 400
    if parameter is not None:
        assert caught.value.code == "invalid_path_parameter"
        assert caught.value.details == {"parameter": parameter}


async def test_refused_session_input_is_adks_input_validation_error(adk, user):
    with pytest.raises(InputValidationError) as caught:
        await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="no spaces")
    refused(caught)
    with pytest.raises(InputValidationError) as caught:
        await adk.sessions.get_session(app_name=adk.app, user_id="bad user", session_id="s")
    refused(caught, "user")
    with pytest.raises(InputValidationError) as caught:
        await adk.sessions.list_sessions(app_name=adk.app, user_id="bad user")
    refused(caught)


async def test_a_user_id_with_a_slash_is_refused_not_missing(adk):
    for call in (
        adk.sessions.get_session(app_name=adk.app, user_id="team/alice", session_id="s"),
        adk.sessions.delete_session(app_name=adk.app, user_id="team/alice", session_id="s"),
        adk.sessions.create_session(app_name=adk.app, user_id="team/alice"),
        adk.sessions.get_user_state(app_name=adk.app, user_id="team/alice"),
        adk.memory.search_memory(app_name=adk.app, user_id="team/alice", query="x"),
        adk.artifacts.list_artifact_keys(app_name=adk.app, user_id="team/alice", session_id="s"),
    ):
        with pytest.raises(InputValidationError) as caught:
            await call
        refused(caught, "user")


async def test_refused_memory_and_artifact_input(adk, user):
    event = Event(
        id="bad-ev",
        invocation_id="i",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="hello")]),
    )
    session = Session(id="s 1", app_name=adk.app, user_id=user, events=[event])
    with pytest.raises(InputValidationError) as caught:
        await adk.memory.add_session_to_memory(session)
    refused(caught)
    await adk.sessions.create_session(app_name=adk.app, user_id=user, session_id="art")
    with pytest.raises(InputValidationError) as caught:
        await adk.artifacts.save_artifact(
            app_name=adk.app,
            user_id=user,
            session_id="art",
            filename="no spaces.txt",
            artifact=types.Part(text="x"),
        )
    refused(caught, "name")
