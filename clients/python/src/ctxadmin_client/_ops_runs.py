"""Invocations, tool tokens and artifacts."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from ._base import B, D, L, N, Runners
from ._calls import Call, body, path, query, raw_bytes, session_path, with_bytes


class RunOperations(Runners[D, L, N, B]):
    # ------------------------------------------------------------------ invocations
    def invoke(self, app: str, user_id: str, session_id: str, **request: Any) -> D:
        """One model call with managed context: ``invocation_id``, ``input``, ``agent`` and
        the optional ``context_policy``, ``memory_retrieval``, ``cache``, ``ingestion``,
        ``deadline_ms``. Not retried (a repeat of a failed call is refused by the API)."""
        return self._one(
            Call("POST", session_path(app, user_id, session_id, "invocations"), json=request)
        )

    def mint_tool_token(
        self,
        app: str,
        user_id: str,
        session_id: str,
        invocation_id: str,
        *,
        tool_name: str,
        capabilities: Sequence[str] | None = None,
        ttl_ms: int | None = None,
        function_call_id: str | None = None,
    ) -> D:
        """A least-authority token for one tool call (its ``token`` is shown once)."""
        return self._one(
            Call(
                "POST",
                session_path(app, user_id, session_id, "invocations", invocation_id, "tool-tokens"),
                json=body(
                    tool_name=tool_name,
                    capabilities=None if capabilities is None else list(capabilities),
                    ttl_ms=ttl_ms,
                    function_call_id=function_call_id,
                ),
            )
        )

    def revoke_tool_token(
        self, app: str, user_id: str, session_id: str, invocation_id: str, prefix: str
    ) -> N:
        return self._none(
            Call(
                "DELETE",
                session_path(
                    app, user_id, session_id, "invocations", invocation_id, "tool-tokens", prefix
                ),
            )
        )

    def get_tool_token_identity(self, app: str) -> D:
        """What the calling tool token (the client's key) is bound to."""
        return self._one(Call("GET", path(app, "tool-token")))

    # ------------------------------------------------------------------ artifacts
    def save_artifact(
        self,
        app: str,
        user_id: str,
        session_id: str,
        name: str,
        *,
        data: bytes,
        mime_type: str = "application/octet-stream",
        custom_metadata: Mapping[str, Any] | None = None,
        display_name: str | None = None,
    ) -> D:
        """Save the next version. The bytes go raw; with ``custom_metadata`` or a
        ``display_name`` (a name to show, kept as given) they go as base64 in JSON (a third
        larger)."""
        where = session_path(app, user_id, session_id, "artifacts", name)
        if custom_metadata is None and display_name is None:
            return self._one(
                Call(
                    "POST",
                    where,
                    params={"format": "raw"},
                    content=bytes(data),
                    headers={"Content-Type": mime_type},
                )
            )
        return self._one(
            Call(
                "POST",
                where,
                json={
                    "data_base64": base64.b64encode(data).decode("ascii"),
                    "mime_type": mime_type,
                    "custom_metadata": dict(custom_metadata) if custom_metadata else None,
                    "display_name": display_name,
                },
            )
        )

    def load_artifact(
        self, app: str, user_id: str, session_id: str, name: str, *, version: int | None = None
    ) -> D:
        """The latest version (or ``version``) with its metadata and its bytes as ``data``."""
        return self._one(
            Call(
                "GET",
                session_path(app, user_id, session_id, "artifacts", name),
                params=query(version=version),
                read=with_bytes,
            )
        )

    def load_artifact_bytes(
        self, app: str, user_id: str, session_id: str, name: str, *, version: int | None = None
    ) -> B:
        """The bytes alone (``format=raw``), without base64."""
        return self._raw(
            Call(
                "GET",
                session_path(app, user_id, session_id, "artifacts", name),
                params=query(format="raw", version=version),
                headers={"Accept": "*/*"},
                read=raw_bytes,
            )
        )

    def list_artifact_names(
        self, app: str, user_id: str, session_id: str, *, limit: int | None = None
    ) -> L:
        """The session's artifact names and the user's ``user:`` names, across pages."""
        return self._many(
            Call(
                "GET",
                session_path(app, user_id, session_id, "artifacts"),
                params=query(limit=limit),
            )
        )

    def list_artifact_versions(
        self, app: str, user_id: str, session_id: str, name: str, *, limit: int | None = None
    ) -> L:
        """The name's versions without their bytes, oldest first, across pages."""
        return self._many(
            Call(
                "GET",
                session_path(app, user_id, session_id, "artifacts", name, "versions"),
                params=query(limit=limit),
            )
        )

    def delete_artifact(self, app: str, user_id: str, session_id: str, name: str) -> N:
        """Delete every version of the name."""
        return self._none(Call("DELETE", session_path(app, user_id, session_id, "artifacts", name)))

    def attach_artifact(
        self,
        app: str,
        user_id: str,
        session_id: str,
        name: str,
        *,
        version: int | None = None,
        author: str | None = None,
    ) -> D:
        """Append an event naming the version in ``actions.artifact_delta``."""
        return self._one(
            Call(
                "POST",
                session_path(app, user_id, session_id, "artifacts", name, "attach"),
                json=body(version=version, author=author),
            )
        )
