"""OpenAPI component schemas of the graph-thread API (validated against real requests and
responses in ``tests/sessions_app/test_threads_api.py``)."""

from __future__ import annotations

from sessions_app.threads import rules


def _strict(properties: dict, required: list[str] | None = None) -> dict:
    schema = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


_ID = {"type": "string", "pattern": f"^{rules.CHECKPOINT_ID_PATTERN}$", "maxLength": 128}
_NS = {"type": "string", "maxLength": rules.MAX_NS_LENGTH, "description": "default ``"}
_TYPED = {
    "type": {"type": "string", "pattern": "^[A-Za-z0-9._:+/-]{1,64}$"},
    "data_base64": {"type": "string", "format": "byte"},
}
_CHANNEL = {"type": "string", "minLength": 1, "maxLength": rules.MAX_CHANNEL_LENGTH}
_VERSION = {"type": "string", "minLength": 1, "maxLength": rules.MAX_VERSION_LENGTH}
_VERSIONS = {
    "type": "object",
    "additionalProperties": _VERSION,
    "maxProperties": rules.MAX_CHANNELS,
    "description": "channel -> version",
}
_METADATA = {
    "type": "object",
    "additionalProperties": True,
    "description": f"at most {rules.MAX_METADATA_BYTES} bytes of canonical JSON",
}
_BLOB = _strict(
    {"channel": _CHANNEL, "version": _VERSION, **_TYPED}, ["channel", "version", *_TYPED]
)
_WRITE_OUT = _strict(
    {"task_id": {"type": "string"}, "channel": _CHANNEL, "task_path": {"type": "string"}, **_TYPED},
    ["task_id", "channel", "task_path", *_TYPED],
)
_CHECKPOINT = {
    "thread_id": {"type": "string"},
    "checkpoint_ns": _NS,
    "checkpoint_id": _ID,
    "parent_checkpoint_id": {**_ID, "nullable": True},
    "checkpoint": _strict(_TYPED, list(_TYPED)),
    "metadata": _METADATA,
    "channel_versions": _VERSIONS,
    "blobs": {"type": "array", "items": _BLOB},
    "writes": {"type": "array", "items": _WRITE_OUT},
    "created_at": {"type": "string", "format": "date-time"},
}

COMPONENTS = {
    "GraphCheckpointPut": _strict(
        {
            "checkpoint_ns": _NS,
            "checkpoint_id": _ID,
            "parent_checkpoint_id": {**_ID, "nullable": True},
            "checkpoint": _strict(_TYPED, list(_TYPED)),
            "metadata": _METADATA,
            "channel_versions": _VERSIONS,
            "blobs": {"type": "array", "items": _BLOB, "maxItems": rules.MAX_CHANNELS},
        },
        ["checkpoint_id", "checkpoint", "channel_versions"],
    ),
    "GraphCheckpointStored": _strict(
        {
            "thread_id": {"type": "string"},
            "checkpoint_ns": _NS,
            "checkpoint_id": _ID,
            "blobs_stored": {"type": "integer", "minimum": 0},
            "pruned": {"type": "integer", "minimum": 0},
        },
        ["thread_id", "checkpoint_ns", "checkpoint_id", "blobs_stored", "pruned"],
    ),
    "GraphCheckpoint": _strict(_CHECKPOINT, list(_CHECKPOINT)),
    "GraphCheckpointPage": _strict(
        {
            "results": {"type": "array", "items": _ref("GraphCheckpoint")},
            "next": {"type": "string", "nullable": True},
            "previous": {"type": "string", "nullable": True},
        },
        ["results", "next", "previous"],
    ),
    "GraphWritesPut": _strict(
        {
            "checkpoint_ns": _NS,
            "task_id": {"type": "string", "maxLength": rules.MAX_TASK_ID_LENGTH},
            "task_path": {"type": "string", "maxLength": rules.MAX_TASK_PATH_LENGTH},
            "writes": {
                "type": "array",
                "maxItems": rules.MAX_WRITES,
                "items": _strict(
                    {
                        "idx": {
                            "type": "integer",
                            "minimum": rules.MIN_WRITE_INDEX,
                            "maximum": rules.MAX_WRITE_INDEX,
                        },
                        "channel": _CHANNEL,
                        **_TYPED,
                    },
                    ["idx", "channel", *_TYPED],
                ),
            },
        },
        ["task_id", "writes"],
    ),
    "GraphWritesStored": _strict({"writes": {"type": "integer", "minimum": 0}}, ["writes"]),
}


def add_components(result, generator, request, public):
    """drf-spectacular post-processing hook: register the components above."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    return result
