"""What a memory add may be: the body of ``POST …/memories`` (and of each add of a batch)
parsed into a ``NewMemory``, metadata and provenance checked, a credential refused.
``memory.entries`` writes it."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from ctxadmin.canonical import canonical_size
from ctxadmin.errors import ServiceError, invalid, strict_object
from ctxadmin.pruning import echoed, is_secret_key, looks_like_secret
from memory.facts import parse_fact_key, parse_instant
from memory.inputs import (
    ADD_KEYS,
    BATCH_KEYS,
    EMBED_MODES,
    ID,
    KEY,
    MAX_BATCH_MEMORIES,
    PROVENANCE_KEYS,
    NewMemory,
    parse_epoch,
    parse_ttl_seconds,
    redact_metadata,
)
from sessions_app.selectors import EventError, parse_timestamp


def parse_metadata(metadata: Any, path: str = "metadata") -> dict:
    """A memory's metadata: an object whose keys are 1-256 characters starting with a letter
    or digit, values under secret-named keys redacted, at most
    ``CTXADMIN_MEMORY_MAX_METADATA_BYTES`` of canonical JSON; refused (422
    ``sensitive_memory_content``, as content is) when a key or string value at any depth
    looks like it carries a credential."""
    if not isinstance(metadata, dict):
        raise invalid(path, "must be an object")
    for key in metadata:
        if not KEY.match(key) and not is_secret_key(key):
            raise invalid(
                f"{path}.{echoed(key)}",
                "keys are 1-256 characters, starting with a letter or digit",
            )
    metadata = redact_metadata(metadata)
    metadata_limit = settings.CTXADMIN_MEMORY_MAX_METADATA_BYTES
    if canonical_size(metadata) > metadata_limit:
        raise invalid(path, f"must be at most {metadata_limit} bytes")
    flagged = credential_in(metadata, path)
    if flagged is not None:
        raise ServiceError(
            "sensitive_memory_content",
            "A metadata value looks like it carries a credential; nothing was stored.",
            status_code=422,
            details={"field": flagged},
        )
    return metadata


def credential_in(value: Any, path: str) -> str | None:
    """The path of the first key or string at any depth of ``value`` that looks like it
    carries a credential (keys bounded as errors quote them), or None."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            if looks_like_secret(node):
                return where
        elif isinstance(node, dict):
            for key, child in node.items():
                if looks_like_secret(key):
                    return f"{where}.{echoed(key)}"
                stack.append((child, f"{where}.{echoed(key)}"))
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(node))
    return None


def parse_new_memory(body: Any) -> NewMemory:
    strict_object(body, ADD_KEYS)
    content = body.get("content")
    if not isinstance(content, str) or not content.strip():
        raise invalid("content", "must be a non-empty string")
    limit = settings.CTXADMIN_MEMORY_MAX_CONTENT_BYTES
    if len(content.encode("utf-8")) > limit:
        raise invalid("content", f"must be at most {limit} bytes of UTF-8")
    if "\x00" in content:
        raise invalid("content", "must not contain NUL characters")
    metadata = parse_metadata(body.get("metadata", {}))
    provenance = body.get("provenance")
    if provenance is None:
        provenance = {}
    if not isinstance(provenance, dict):
        raise invalid("provenance", "must be an object")
    unknown = sorted(set(provenance) - PROVENANCE_KEYS)
    if unknown:
        raise invalid(f"provenance.{echoed(unknown[0])}", "unknown field")
    ids = {}
    for name in ("session_id", "event_id", "author"):
        value = provenance.get(name)
        if value is None:  # null is absent, as answers show an absent one
            value = ""
        if not isinstance(value, str) or (value and not ID.match(value)):
            raise invalid(f"provenance.{name}", "must be an identifier of 1-128 characters")
        ids[name] = value
    when = None
    if provenance.get("timestamp") is not None:
        try:
            when = parse_timestamp(provenance["timestamp"], "provenance.timestamp")
        except EventError as exc:
            raise invalid(exc.path, exc.message) from None
    key = body.get("idempotency_key")
    if key is not None and (not isinstance(key, str) or not KEY.match(key)):
        raise invalid("idempotency_key", "must be 1-256 characters from A-Z a-z 0-9 . _ : @ / -")
    embed = body.get("embed", "auto")
    if embed not in EMBED_MODES:
        raise invalid("embed", "must be auto, sync or async")
    epoch = parse_epoch(body.get("erasure_epoch"))
    ttl_seconds = parse_ttl_seconds(body.get("ttl_seconds"))
    replace = body.get("replace", False)
    if not isinstance(replace, bool):
        raise invalid("replace", "must be true or false")
    if replace and key is None:
        raise invalid("replace", "needs an idempotency_key (the entry to replace)")
    fact_key = parse_fact_key(body.get("key"))
    if fact_key is not None and replace:
        raise invalid("replace", "does not apply to a memory with a key (it supersedes instead)")
    valid_from = parse_instant(body.get("valid_from"), "valid_from")
    if looks_like_secret(content):
        raise ServiceError(
            "sensitive_memory_content",
            "The content looks like it carries a credential; it was not stored.",
            status_code=422,
        )
    return NewMemory(
        content=content,
        metadata=metadata,
        idempotency_key=key,
        session_id=ids["session_id"],
        event_id=ids["event_id"],
        author=ids["author"],
        source_timestamp=when,
        embed=embed,
        erasure_epoch=epoch,
        ttl_seconds=ttl_seconds,
        replace=replace,
        key=fact_key,
        valid_from=valid_from,
    )


def parse_new_memories(body: Any) -> list[NewMemory]:
    """``{"memories": [...]}``: 1 to ``MAX_BATCH_MEMORIES`` adds, each checked as one add
    is; a refusal names the add (``memories.<i>.<field>``, ``details.index``)."""
    strict_object(body, BATCH_KEYS)
    items = body.get("memories")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH_MEMORIES:
        raise invalid("memories", f"must be a list of 1 to {MAX_BATCH_MEMORIES} memories")
    parsed = []
    for index, item in enumerate(items):
        try:
            parsed.append(parse_new_memory(item))
        except ServiceError as exc:
            raise in_batch(exc, index) from None
    return parsed


def in_batch(exc: ServiceError, index: int) -> ServiceError:
    details = {**exc.details, "index": index}
    message = exc.message
    if "field" in details:
        details["field"] = f"memories.{index}.{details['field']}"
        message = f"memories.{index}.{message}"
    return ServiceError(
        exc.code, message, status_code=exc.status_code, details=details, headers=exc.headers
    )
