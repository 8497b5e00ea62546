"""CtxAdminArtifactService keeps ADK's BaseArtifactService contract: every method runs on
ctxadmin and on ADK's InMemoryArtifactService, and the answers are compared."""

from __future__ import annotations

import pytest
from google.adk.artifacts import InMemoryArtifactService
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types

pytestmark = pytest.mark.anyio


def blob(data: bytes, mime: str = "application/pdf") -> types.Part:
    return types.Part(inline_data=types.Blob(mime_type=mime, data=data))


@pytest.fixture
async def session_id(adk, user) -> str:
    """A session of ``user`` (a session-scoped artifact needs its session in ctxadmin)."""
    session = await adk.sessions.create_session(app_name=adk.app, user_id=user)
    return session.id


def both(adk):
    return (adk.artifacts, InMemoryArtifactService())


async def test_versions_count_from_zero_and_load_reads_latest_or_given(adk, user, session_id):
    answers = []
    for service in both(adk):
        where = {"app_name": adk.app, "user_id": user, "session_id": session_id}
        saved = [
            await service.save_artifact(filename="report.pdf", artifact=blob(b"v0"), **where),
            await service.save_artifact(filename="report.pdf", artifact=blob(b"v1"), **where),
            await service.save_artifact(
                filename="report.pdf", artifact=blob(b"v2", "image/png"), **where
            ),
        ]
        loads = [
            await service.load_artifact(filename="report.pdf", **where),
            await service.load_artifact(filename="report.pdf", version=1, **where),
            await service.load_artifact(filename="report.pdf", version=0, **where),
            await service.load_artifact(filename="report.pdf", version=7, **where),
            await service.load_artifact(filename="missing.pdf", **where),
        ]
        versions = await service.list_versions(filename="report.pdf", **where)
        answers.append((saved, loads, versions))
    assert answers[0] == answers[1]
    saved, loads, versions = answers[0]
    assert saved == versions == [0, 1, 2]
    assert loads[0] == blob(b"v2", "image/png") and loads[3] is None and loads[4] is None


async def test_text_and_file_parts_load_as_they_were_saved(adk, user, session_id):
    parts = [
        types.Part(text="plain words, ünïcode"),
        types.Part(file_data=types.FileData(file_uri="gs://bucket/x.csv", mime_type="text/csv")),
    ]
    for service in both(adk):
        where = {"app_name": adk.app, "user_id": user, "session_id": session_id}
        for index, part in enumerate(parts):
            await service.save_artifact(filename=f"p{index}.bin", artifact=part, **where)
            assert await service.load_artifact(filename=f"p{index}.bin", **where) == part
            version = await service.get_artifact_version(filename=f"p{index}.bin", **where)
            assert version.mime_type == ("text/plain", "text/csv")[index]


async def test_user_names_are_seen_from_every_session_and_without_one(adk, user):
    first = (await adk.sessions.create_session(app_name=adk.app, user_id=user)).id
    second = (await adk.sessions.create_session(app_name=adk.app, user_id=user)).id
    answers = []
    for service in both(adk):
        common = {"app_name": adk.app, "user_id": user}
        await service.save_artifact(
            filename="user:avatar.png",
            artifact=blob(b"me", "image/png"),
            session_id=first,
            **common,
        )
        await service.save_artifact(
            filename="user:avatar.png", artifact=blob(b"me2", "image/png"), **common
        )
        await service.save_artifact(
            filename="notes.txt", artifact=blob(b"n", "text/plain"), session_id=first, **common
        )
        answers.append(
            (
                await service.list_artifact_keys(session_id=first, **common),
                await service.list_artifact_keys(session_id=second, **common),
                await service.list_artifact_keys(**common),
                await service.load_artifact(
                    filename="user:avatar.png", session_id=second, **common
                ),
                await service.list_versions(filename="user:avatar.png", **common),
            )
        )
    assert answers[0] == answers[1]
    assert answers[0][0] == ["notes.txt", "user:avatar.png"]
    assert answers[0][1] == answers[0][2] == ["user:avatar.png"]


async def test_another_users_artifacts_are_absent(adk, user, other_user, session_id):
    await adk.artifacts.save_artifact(
        app_name=adk.app, user_id=user, filename="user:secret-plan.txt", artifact=blob(b"x")
    )
    assert (
        await adk.artifacts.load_artifact(
            app_name=adk.app, user_id=other_user, filename="user:secret-plan.txt"
        )
        is None
    )
    assert await adk.artifacts.list_artifact_keys(app_name=adk.app, user_id=other_user) == []


async def test_a_session_name_needs_a_session_id(adk, user):
    for service in both(adk):
        with pytest.raises(InputValidationError):
            await service.save_artifact(
                app_name=adk.app, user_id=user, filename="loose.txt", artifact=blob(b"x")
            )


async def test_delete_removes_every_version_and_saving_starts_again(adk, user, session_id):
    answers = []
    for service in both(adk):
        where = {"app_name": adk.app, "user_id": user, "session_id": session_id}
        await service.save_artifact(filename="draft.txt", artifact=blob(b"a"), **where)
        await service.save_artifact(filename="draft.txt", artifact=blob(b"b"), **where)
        await service.delete_artifact(filename="draft.txt", **where)
        after_delete = (
            await service.load_artifact(filename="draft.txt", **where),
            await service.list_versions(filename="draft.txt", **where),
            await service.list_artifact_versions(filename="draft.txt", **where),
            await service.get_artifact_version(filename="draft.txt", **where),
        )
        await service.delete_artifact(filename="draft.txt", **where)  # a second time: quiet
        restarted = await service.save_artifact(filename="draft.txt", artifact=blob(b"c"), **where)
        answers.append((after_delete, restarted))
    assert answers[0] == answers[1] == ((None, [], [], None), 0)


async def test_version_metadata_as_adk_describes_it(adk, user, session_id):
    answers = []
    for service in both(adk):
        where = {"app_name": adk.app, "user_id": user, "session_id": session_id}
        await service.save_artifact(
            filename="chart.png",
            artifact=blob(b"png0", "image/png"),
            custom_metadata={"source": "plotter", "dpi": 300},
            **where,
        )
        await service.save_artifact(
            filename="chart.png", artifact=blob(b"svg1", "image/svg+xml"), **where
        )
        listed = await service.list_artifact_versions(filename="chart.png", **where)
        latest = await service.get_artifact_version(filename="chart.png", **where)
        first = await service.get_artifact_version(filename="chart.png", version=0, **where)
        none = await service.get_artifact_version(filename="chart.png", version=5, **where)
        answers.append(
            (
                [(v.version, v.mime_type, v.custom_metadata) for v in listed],
                (latest.version, latest.mime_type),
                (first.version, first.custom_metadata),
                none,
            )
        )
        assert all(v.canonical_uri and v.create_time > 0 for v in listed)
    assert answers[0] == answers[1]
    assert answers[0][0] == [
        (0, "image/png", {"source": "plotter", "dpi": 300}),
        (1, "image/svg+xml", {}),
    ]


async def test_an_inline_parts_display_name_loads_back(adk, user, session_id):
    where = {"app_name": adk.app, "user_id": user, "session_id": session_id}
    named = types.Part(
        inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG", display_name="Map · Oslo")
    )
    answers = []
    for service in both(adk):
        await service.save_artifact(filename="map.png", artifact=named, **where)
        await service.save_artifact(filename="map.png", artifact=blob(b"plain"), **where)
        first = await service.load_artifact(filename="map.png", version=0, **where)
        latest = await service.load_artifact(filename="map.png", **where)
        answers.append((first.model_dump(), latest.model_dump()))
    ours, theirs = answers
    assert ours == theirs
    assert ours[0]["inline_data"]["display_name"] == "Map · Oslo"
    assert ours[1]["inline_data"]["display_name"] is None
