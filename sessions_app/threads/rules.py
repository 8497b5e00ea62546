"""The graph-thread resource's input rules (pure: no Django).

A checkpoint put, a batch of pending writes and a list's filter are parsed here into plain
values, or refused with a :class:`RuleError` naming the field. Blob payloads are opaque
bytes the client serialised (a type tag and base64 data); the service never reads them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from ctxadmin.api.jsonsafe import JsonInputError, loads_strict
from ctxadmin.canonical import canonical_size
from ctxadmin.pruning import echoed

MAX_NS_LENGTH = 512
MAX_CHECKPOINT_ID_LENGTH = 128
MAX_CHANNEL_LENGTH = 256
MAX_VERSION_LENGTH = 128
MAX_TYPE_LENGTH = 64
MAX_TASK_ID_LENGTH = 256
MAX_TASK_PATH_LENGTH = 1024
MAX_CHANNELS = 1000  # channel versions (and so blobs) per checkpoint
MAX_WRITES = 1000  # writes per put_writes call
MAX_METADATA_BYTES = 64 * 1024
MAX_FILTER_BYTES = 16 * 1024
MAX_FILTER_KEYS = 32
MAX_FILTER_DEPTH = 32
# LangGraph's special channels keep negative indexes and are replaced, not kept, on a repeat.
MIN_WRITE_INDEX = -1000
MAX_WRITE_INDEX = 1_000_000

CHECKPOINT_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}"
_CHECKPOINT_ID = re.compile(rf"^{CHECKPOINT_ID_PATTERN}\Z")
_TYPE = re.compile(r"^[A-Za-z0-9._:+/-]{1,64}\Z")
_PUT_FIELDS = frozenset(
    {
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "checkpoint",
        "metadata",
        "channel_versions",
        "blobs",
    }
)
_BLOB_FIELDS = frozenset({"channel", "version", "type", "data_base64"})
_TYPED_FIELDS = frozenset({"type", "data_base64"})
_WRITES_FIELDS = frozenset({"checkpoint_ns", "task_id", "task_path", "writes"})
_WRITE_FIELDS = frozenset({"idx", "channel", "type", "data_base64"})


class RuleError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Typed:
    """A value the client serialised: its type tag and bytes."""

    type: str
    data: bytes


@dataclass(frozen=True)
class Blob:
    channel: str
    version: str
    value: Typed


@dataclass(frozen=True)
class CheckpointPut:
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: Typed
    metadata: dict
    channel_versions: dict[str, str]
    blobs: tuple[Blob, ...]


@dataclass(frozen=True)
class Write:
    idx: int
    channel: str
    value: Typed


@dataclass(frozen=True)
class WritesPut:
    checkpoint_ns: str
    task_id: str
    task_path: str
    writes: tuple[Write, ...]


def _object(value: Any, field: str, allowed: frozenset[str], required: frozenset[str]) -> dict:
    if not isinstance(value, dict):
        raise RuleError(field, "must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        # A key the client sent is echoed bounded, and redacted when it looks like a secret.
        name = echoed(unknown[0])
        raise RuleError(f"{field}.{name}" if field != "body" else name, "unknown field")
    missing = sorted(required - set(value))
    if missing:
        raise RuleError(f"{field}.{missing[0]}" if field != "body" else missing[0], "required")
    return value


def _text(value: Any, field: str, maximum: int, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise RuleError(field, "must be a string")
    if not empty and not value:
        raise RuleError(field, "must not be empty")
    if len(value) > maximum:
        raise RuleError(field, f"at most {maximum} characters")
    if "\x00" in value:
        raise RuleError(field, "must not contain NUL")
    return value


def checkpoint_ns(value: Any, field: str = "checkpoint_ns") -> str:
    return _text(value, field, MAX_NS_LENGTH, empty=True)


def checkpoint_id(value: Any, field: str = "checkpoint_id") -> str:
    if not isinstance(value, str) or not _CHECKPOINT_ID.match(value):
        raise RuleError(
            field,
            "must be 1-128 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
        )
    return value


def _typed(value: Any, field: str) -> Typed:
    found = _object(value, field, _TYPED_FIELDS, _TYPED_FIELDS)
    kind = found["type"]
    if not isinstance(kind, str) or not _TYPE.match(kind):
        raise RuleError(f"{field}.type", "must be 1-64 characters from A-Z a-z 0-9 . _ : + / -")
    data = found["data_base64"]
    if not isinstance(data, str):
        raise RuleError(f"{field}.data_base64", "must be a base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RuleError(f"{field}.data_base64", "must be standard base64") from None
    return Typed(kind, raw)


def _metadata(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise RuleError(field, "must be a JSON object")
    try:
        size = canonical_size(value)
    except (TypeError, ValueError):
        raise RuleError(field, "must be JSON") from None
    if size > MAX_METADATA_BYTES:
        raise RuleError(field, f"at most {MAX_METADATA_BYTES} bytes of canonical JSON")
    if "\\u0000" in json.dumps(value):
        raise RuleError(field, "must not contain NUL")
    return value


def parse_put(body: Any) -> CheckpointPut:
    """A checkpoint put: the checkpoint without its channel values (typed), its metadata
    (JSON, filtered by lists), its channel versions and the blobs of the channels whose
    version is new."""
    found = _object(
        body, "body", _PUT_FIELDS, frozenset({"checkpoint_id", "checkpoint", "channel_versions"})
    )
    ns = checkpoint_ns(found.get("checkpoint_ns", ""))
    cid = checkpoint_id(found["checkpoint_id"])
    parent = found.get("parent_checkpoint_id")
    if parent is not None:
        parent = checkpoint_id(parent, "parent_checkpoint_id")
    versions = found["channel_versions"]
    if not isinstance(versions, dict):
        raise RuleError("channel_versions", "must be a JSON object")
    if len(versions) > MAX_CHANNELS:
        raise RuleError("channel_versions", f"at most {MAX_CHANNELS} channels")
    for channel, version in versions.items():
        _text(channel, "channel_versions", MAX_CHANNEL_LENGTH)
        _text(version, f"channel_versions.{echoed(channel)}", MAX_VERSION_LENGTH)
    raw_blobs = found.get("blobs", [])
    if not isinstance(raw_blobs, list):
        raise RuleError("blobs", "must be an array")
    if len(raw_blobs) > MAX_CHANNELS:
        raise RuleError("blobs", f"at most {MAX_CHANNELS} blobs")
    blobs = []
    seen: set[tuple[str, str]] = set()
    for index, raw in enumerate(raw_blobs):
        where = f"blobs[{index}]"
        item = _object(raw, where, _BLOB_FIELDS, _BLOB_FIELDS)
        channel = _text(item["channel"], f"{where}.channel", MAX_CHANNEL_LENGTH)
        version = _text(item["version"], f"{where}.version", MAX_VERSION_LENGTH)
        if (channel, version) in seen:
            raise RuleError(where, "repeats a channel and version")
        seen.add((channel, version))
        blobs.append(Blob(channel, version, _typed({k: item[k] for k in _TYPED_FIELDS}, where)))
    return CheckpointPut(
        checkpoint_ns=ns,
        checkpoint_id=cid,
        parent_checkpoint_id=parent,
        checkpoint=_typed(found["checkpoint"], "checkpoint"),
        metadata=_metadata(found.get("metadata", {}), "metadata"),
        channel_versions=dict(versions),
        blobs=tuple(blobs),
    )


def parse_writes(body: Any) -> WritesPut:
    """Pending writes of one task against one checkpoint."""
    found = _object(body, "body", _WRITES_FIELDS, frozenset({"task_id", "writes"}))
    writes_raw = found["writes"]
    if not isinstance(writes_raw, list):
        raise RuleError("writes", "must be an array")
    if len(writes_raw) > MAX_WRITES:
        raise RuleError("writes", f"at most {MAX_WRITES} writes")
    writes = []
    seen: set[int] = set()
    for index, raw in enumerate(writes_raw):
        where = f"writes[{index}]"
        item = _object(raw, where, _WRITE_FIELDS, _WRITE_FIELDS)
        idx = item["idx"]
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise RuleError(f"{where}.idx", "must be an integer")
        if not MIN_WRITE_INDEX <= idx <= MAX_WRITE_INDEX:
            raise RuleError(f"{where}.idx", f"must be from {MIN_WRITE_INDEX} to {MAX_WRITE_INDEX}")
        if idx in seen:
            raise RuleError(f"{where}.idx", "repeats an index")
        seen.add(idx)
        channel = _text(item["channel"], f"{where}.channel", MAX_CHANNEL_LENGTH)
        writes.append(Write(idx, channel, _typed({k: item[k] for k in _TYPED_FIELDS}, where)))
    return WritesPut(
        checkpoint_ns=checkpoint_ns(found.get("checkpoint_ns", "")),
        task_id=_text(found["task_id"], "task_id", MAX_TASK_ID_LENGTH, empty=True),
        task_path=_text(found.get("task_path", ""), "task_path", MAX_TASK_PATH_LENGTH, empty=True),
        writes=tuple(writes),
    )


def parse_filter(raw: str | None) -> dict | None:
    """A list's ``filter``: a JSON object of metadata keys and the values they must equal."""
    if raw is None:
        return None
    if len(raw.encode()) > MAX_FILTER_BYTES:
        raise RuleError("filter", f"at most {MAX_FILTER_BYTES} bytes")
    try:
        value = loads_strict(raw.encode("utf-8"), MAX_FILTER_DEPTH, name="filter")
    except JsonInputError as error:
        raise RuleError("filter", f"must be a JSON object; {error.message}") from None
    if not isinstance(value, dict):
        raise RuleError("filter", "must be a JSON object")
    if len(value) > MAX_FILTER_KEYS:
        raise RuleError("filter", f"at most {MAX_FILTER_KEYS} keys")
    for key in value:
        _text(key, "filter", MAX_CHANNEL_LENGTH)
    return value
