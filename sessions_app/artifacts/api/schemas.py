"""OpenAPI component schemas of the artifact API (validated against real requests and
responses in ``tests/sessions_app/test_artifacts.py``)."""

from __future__ import annotations

from ctxadmin.api.paths import ARTIFACT_NAME_PATTERN
from sessions_app.artifacts.rules import MAX_MIME_LENGTH, MIME_PATTERN


def _strict(properties: dict, required: list[str] | None = None) -> dict:
    schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _page(item: str) -> dict:
    return _strict(
        {
            "results": {"type": "array", "items": _ref(item)},
            "next": {"type": "string", "nullable": True},
            "previous": {"type": "string", "nullable": True},
        },
        ["results", "next", "previous"],
    )


_NAME = {"type": "string", "pattern": f"^{ARTIFACT_NAME_PATTERN}$", "maxLength": 256}
_SCOPE = {
    "enum": ["session", "user"],
    "description": "`user` for a `user:` name (every session of the user sees it)",
}
_MIME = {"type": "string", "pattern": f"^{MIME_PATTERN}$", "maxLength": MAX_MIME_LENGTH}
_METADATA = {
    "type": "object",
    "nullable": True,
    "additionalProperties": True,
    "description": "at most CTXADMIN_ARTIFACT_MAX_METADATA_BYTES (4096) of canonical JSON; "
    "secret-named keys are dropped",
}
_DISPLAY_NAME = {
    "type": "string",
    "nullable": True,
    "maxLength": 1024,
    "description": "a name to show for the artifact (ADK's Blob.display_name), kept as "
    "given; null when none was given",
}
_VERSION_PROPERTIES = {
    "name": _NAME,
    "scope": _SCOPE,
    "version": {"type": "integer", "minimum": 0},
    "mime_type": _MIME,
    "size": {"type": "integer", "minimum": 0},
    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
    "created_at": {"type": "string", "format": "date-time"},
    "custom_metadata": _METADATA,
    "display_name": _DISPLAY_NAME,
}

COMPONENTS = {
    "ArtifactSave": _strict(
        {
            "data_base64": {
                "type": "string",
                "format": "byte",
                "description": "the bytes in standard base64 (at most "
                "CTXADMIN_ARTIFACT_MAX_BYTES decoded)",
            },
            "mime_type": _MIME,
            "custom_metadata": _METADATA,
            "display_name": _DISPLAY_NAME,
        },
        ["data_base64", "mime_type"],
    ),
    "ArtifactVersion": _strict(_VERSION_PROPERTIES, list(_VERSION_PROPERTIES)),
    "ArtifactContent": _strict(
        {**_VERSION_PROPERTIES, "data_base64": {"type": "string", "format": "byte"}},
        [*_VERSION_PROPERTIES, "data_base64"],
    ),
    "ArtifactName": _strict(
        {
            "name": _NAME,
            "scope": _SCOPE,
            "latest_version": {"type": "integer", "minimum": 0},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
        ["name", "scope", "latest_version", "created_at", "updated_at"],
    ),
    "ArtifactNamePage": _page("ArtifactName"),
    "ArtifactVersionPage": _page("ArtifactVersion"),
    "ArtifactAttach": _strict(
        {
            "version": {"type": "integer", "minimum": 0, "description": "default: the latest"},
            "author": {
                "type": "string",
                "maxLength": 128,
                "description": "the event's author (API keys only; a tool token's is its tool)",
            },
        }
    ),
    "ArtifactAttached": _strict(
        {**_VERSION_PROPERTIES, "event_id": {"type": "string"}},
        [*_VERSION_PROPERTIES, "event_id"],
    ),
}


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    return result
