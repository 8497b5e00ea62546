"""``CtxAdminArtifactService``: Google ADK's ``BaseArtifactService`` on ctxadmin's artifacts.

ADK's semantics hold: every save makes the next version (0, 1, 2, …), a load reads the latest
or a given version, a delete removes every version; a ``user:`` name belongs to the user and
is seen from every session of the user (and with no session at all).

A part is stored as bytes with a mime type: ``inline_data`` as its bytes under its own mime
type (its ``display_name`` as the version's); a ``text`` part as UTF-8 under ``text/plain;
adk-part=text``; a ``file_data`` part (a reference to content kept elsewhere, or to another
artifact) as its JSON under
``<its mime type>; adk-part=file-data``. The ``adk-part`` parameter is how a load gives back
the kind of part that was saved; ``ArtifactVersion.mime_type`` leaves it out.
"""

from __future__ import annotations

import json
from typing import Any, cast

from google.adk.artifacts import artifact_util
from google.adk.artifacts.base_artifact_service import (
    ArtifactVersion,
    BaseArtifactService,
    ensure_part,
)
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types
from typing_extensions import override

from ctxadmin_client import errors
from ctxadmin_client.adk import _wire
from ctxadmin_client.adk._connection import ConnectedService, refusing_invalid_input

USER_PREFIX = "user:"
#: The session id under which a ``user:`` name is reached when ADK gives none (any session
#: id of the user reaches it; this one need not exist).
USER_SCOPE_SESSION = "adk-user-scope"
PART_PARAMETER = "adk-part"
TEXT_MIME = "text/plain"
DEFAULT_MIME = "application/octet-stream"


def _encode(part: types.Part) -> tuple[bytes, str, str | None]:
    """The bytes, the stored mime type and ADK's mime type of a part."""
    if part.inline_data is not None:
        mime = part.inline_data.mime_type or DEFAULT_MIME
        return part.inline_data.data or b"", mime, part.inline_data.mime_type
    if part.text is not None:
        return part.text.encode("utf-8"), f"{TEXT_MIME}; {PART_PARAMETER}=text", TEXT_MIME
    if part.file_data is not None:
        data = json.dumps(part.file_data.model_dump(mode="json", exclude_none=True)).encode()
        mime = part.file_data.mime_type or DEFAULT_MIME
        # An artifact reference's mime type is its target's, unknown until it is loaded.
        shown = None if artifact_util.is_artifact_ref(part) else part.file_data.mime_type
        return data, f"{mime}; {PART_PARAMETER}=file-data", shown
    raise InputValidationError("Not supported artifact type.")


def _split_mime(stored: str) -> tuple[str, str | None]:
    """The mime type without the ``adk-part`` parameter, and that parameter's value."""
    pieces = [piece.strip() for piece in stored.split(";")]
    kind = None
    kept = [pieces[0]]
    for piece in pieces[1:]:
        name, _, value = piece.partition("=")
        if name.strip().lower() == PART_PARAMETER:
            kind = value.strip()
        else:
            kept.append(piece)
    return "; ".join(kept), kind


def _decode(data: bytes, stored_mime: str, display_name: str | None = None) -> types.Part:
    mime, kind = _split_mime(stored_mime)
    if kind == "text":
        return types.Part(text=data.decode("utf-8"))
    if kind == "file-data":
        return types.Part(file_data=types.FileData.model_validate(json.loads(data)))
    return types.Part(inline_data=types.Blob(mime_type=mime, data=data, display_name=display_name))


class CtxAdminArtifactService(ConnectedService, BaseArtifactService):
    """ADK artifacts stored in ctxadmin (names: 1-256 characters from ``A-Z a-z 0-9 . _ : @
    -``, starting with a letter or digit, ``user:`` then a letter or digit)."""

    def _session(self, filename: str, session_id: str | None) -> str:
        session_id = _wire.session_id(session_id) if session_id else session_id
        if filename.startswith(USER_PREFIX):
            return session_id or USER_SCOPE_SESSION
        if session_id is None:
            raise InputValidationError("Session ID must be provided for session-scoped artifacts.")
        return session_id

    @override
    @refusing_invalid_input
    async def save_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | dict[str, Any],
        session_id: str | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        sid = self._session(filename, session_id)
        part = ensure_part(artifact)
        if part.file_data is not None and artifact_util.is_artifact_ref(part):
            parsed = artifact_util.parse_artifact_uri(cast(str, part.file_data.file_uri))
            if not parsed:
                raise InputValidationError(
                    f"Invalid artifact reference URI: {part.file_data.file_uri}"
                )
            artifact_util.validate_artifact_reference_scope(
                app_name=app_name,
                user_id=user_id,
                session_id=_wire.session_id(session_id) if session_id else session_id,
                parsed_uri=parsed,
            )
        data, mime, _shown = _encode(part)
        answer = await self.client.save_artifact(
            self._app(app_name),
            user_id,
            sid,
            filename,
            data=data,
            mime_type=mime,
            custom_metadata=custom_metadata or None,
            display_name=part.inline_data.display_name if part.inline_data else None,
        )
        return int(answer["version"])

    @override
    @refusing_invalid_input
    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        return await self._load(
            app_name,
            user_id,
            filename,
            session_id,
            version,
            artifact_util._MAX_ARTIFACT_REFERENCE_DEPTH,
        )

    async def _load(
        self,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None,
        version: int | None,
        depth: int,
    ) -> types.Part | None:
        sid = self._session(filename, session_id)
        if version is not None and version < 0:
            return None
        try:
            answer = await self.client.load_artifact(
                self._app(app_name), user_id, sid, filename, version=version
            )
        except errors.NotFoundError:
            return None
        part = _decode(answer["data"], answer["mime_type"], answer.get("display_name"))
        if artifact_util.is_artifact_ref(part):
            target = artifact_util.resolve_artifact_reference(
                file_uri=cast(str, cast(types.FileData, part.file_data).file_uri),
                app_name=app_name,
                user_id=user_id,
                session_id=session_id,
                remaining_depth=depth,
            )
            return await self._load(
                target.app_name,
                target.user_id,
                target.filename,
                target.session_id,
                target.version,
                depth - 1,
            )
        if artifact_util._is_rewind_tombstone(part):
            return None
        return part

    @override
    @refusing_invalid_input
    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str | None = None
    ) -> list[str]:
        try:
            names = [
                item["name"]
                async for item in self.client.list_artifact_names(
                    self._app(app_name),
                    user_id,
                    _wire.session_id(session_id) if session_id else USER_SCOPE_SESSION,
                )
            ]
        except errors.NotFoundError:
            return []
        if session_id is None:
            names = [name for name in names if name.startswith(USER_PREFIX)]
        return sorted(names)

    @override
    @refusing_invalid_input
    async def delete_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> None:
        sid = self._session(filename, session_id)
        try:
            await self.client.delete_artifact(self._app(app_name), user_id, sid, filename)
        except errors.NotFoundError:
            return

    @override
    @refusing_invalid_input
    async def list_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[int]:
        versions = await self.list_artifact_versions(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        return [item.version for item in versions]

    @override
    @refusing_invalid_input
    async def list_artifact_versions(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
    ) -> list[ArtifactVersion]:
        sid = self._session(filename, session_id)
        app = self._app(app_name)
        try:
            items = [
                item
                async for item in self.client.list_artifact_versions(app, user_id, sid, filename)
            ]
        except errors.NotFoundError:
            return []
        return [self._version(app, user_id, sid, filename, item) for item in items]

    @override
    @refusing_invalid_input
    async def get_artifact_version(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        versions = await self.list_artifact_versions(
            app_name=app_name, user_id=user_id, filename=filename, session_id=session_id
        )
        if not versions:
            return None
        if version is None:
            return versions[-1]
        return next((item for item in versions if item.version == version), None)

    def _version(
        self, app: str, user_id: str, sid: str, filename: str, item: dict
    ) -> ArtifactVersion:
        mime, kind = _split_mime(item["mime_type"])
        if kind == "file-data" and mime == DEFAULT_MIME:
            shown = None  # saved with no mime type of its own
        else:
            shown = mime
        base = str(self.client.base_url).rstrip("/")
        uri = (
            f"{base}/api/v1/apps/{app}/users/{user_id}/sessions/{sid}/artifacts/{filename}"
            f"?version={item['version']}"
        )
        return ArtifactVersion(
            version=int(item["version"]),
            canonical_uri=uri,
            custom_metadata=dict(item.get("custom_metadata") or {}),
            create_time=_wire.seconds(item["created_at"]),
            mime_type=shown,
        )
