"""What an artifact may be: its name, mime type, custom metadata and the JSON save body (pure;
no Django import).

Names follow Google ADK: a name starting with ``user:`` belongs to the user (every session of
the user sees it); any other name belongs to one session.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from ctxadmin.api.paths import ARTIFACT_NAME_PATTERN
from ctxadmin.canonical import canonical_json
from ctxadmin.pruning import echoed, prune_secrets

USER_PREFIX = "user:"
SESSION_SCOPE = "session"
USER_SCOPE = "user"

MAX_NAME_LENGTH = 256
MAX_MIME_LENGTH = 255
MAX_METADATA_KEY_LENGTH = 256
MAX_DISPLAY_NAME_LENGTH = 1024

_NAME = re.compile(rf"^{ARTIFACT_NAME_PATTERN}\Z")
_WORD = r"[A-Za-z0-9!#$&^_.+-]+"
# ``type/subtype`` with optional parameters (``text/plain; charset=utf-8``), printable ASCII:
# the stored value is sent back as a Content-Type header.
MIME_PATTERN = (
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
    rf"(?: *; *{_WORD}=(?:{_WORD}|\"[ !#-\[\]-~]*\"))*"
)
_MIME = re.compile(rf"^{MIME_PATTERN}\Z")

SAVE_FIELDS = frozenset({"data_base64", "mime_type", "custom_metadata", "display_name"})


class RuleError(ValueError):
    """An input that breaks a rule: ``field`` names it; ``code`` and ``status`` are the API's."""

    def __init__(
        self,
        field: str,
        message: str,
        *,
        code: str = "validation_error",
        status: int = 400,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code
        self.status = status
        self.details = details or {}


def scope_of(name: str) -> str:
    return USER_SCOPE if name.startswith(USER_PREFIX) else SESSION_SCOPE


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise RuleError(
            "name",
            "must be 1-256 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or "
            "digit, without '..' ('user:' followed by a letter or digit for the user's "
            "namespace)",
        )
    return name


def check_mime_type(mime_type: Any) -> str:
    if not isinstance(mime_type, str) or not _MIME.match(mime_type):
        raise RuleError(
            "mime_type",
            "must be a media type such as image/png or text/plain; charset=utf-8 "
            f"(printable ASCII, at most {MAX_MIME_LENGTH} characters)",
        )
    if len(mime_type) > MAX_MIME_LENGTH:
        raise RuleError("mime_type", f"must be at most {MAX_MIME_LENGTH} characters")
    return mime_type


def check_display_name(value: Any) -> str | None:
    """A name to show for the artifact (ADK's ``Blob.display_name``), kept as given."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise RuleError("display_name", "must be a string or null")
    if len(value) > MAX_DISPLAY_NAME_LENGTH:
        raise RuleError("display_name", f"must be at most {MAX_DISPLAY_NAME_LENGTH} characters")
    if "\x00" in value:
        raise RuleError("display_name", "must not contain NUL characters")
    return value


def check_size(size: int, limit: int) -> None:
    if size > limit:
        raise RuleError(
            "data",
            f"the artifact is {size} bytes; the limit is {limit}",
            code="artifact_too_large",
            status=413,
            details={"size": size, "limit_bytes": limit},
        )


def clean_metadata(value: Any, limit: int) -> dict | None:
    """The metadata as stored: an object (or None) without secret-named keys at any depth,
    its canonical JSON at most ``limit`` bytes."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RuleError("custom_metadata", "must be an object or null")
    for key in value:
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_METADATA_KEY_LENGTH:
            raise RuleError("custom_metadata", f"keys are 1-{MAX_METADATA_KEY_LENGTH} characters")
    pruned = prune_secrets(value)
    try:
        encoded = canonical_json(pruned)
    except (TypeError, ValueError):
        raise RuleError("custom_metadata", "must be plain JSON (no NaN or infinity)") from None
    if b"\\u0000" in encoded:
        raise RuleError("custom_metadata", "must not contain NUL characters")
    if len(encoded) > limit:
        raise RuleError("custom_metadata", f"must be at most {limit} bytes of canonical JSON")
    return pruned


@dataclass(frozen=True)
class SaveBody:
    data: bytes
    mime_type: str
    custom_metadata: Any
    display_name: str | None = None


def parse_save_body(body: Any, max_bytes: int) -> SaveBody:
    """``{"data_base64", "mime_type", "custom_metadata"?, "display_name"?}``: strict,
    decoded, size-checked before the bytes are decoded."""
    if not isinstance(body, dict):
        raise RuleError("body", "must be a JSON object")
    unknown = sorted(set(body) - SAVE_FIELDS)
    if unknown:
        raise RuleError(echoed(unknown[0]), "unknown field")
    encoded = body.get("data_base64")
    if not isinstance(encoded, str):
        raise RuleError("data_base64", "is required: the artifact's bytes in standard base64")
    padding = len(encoded) - len(encoded.rstrip("="))
    check_size(len(encoded) // 4 * 3 - padding, max_bytes)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise RuleError("data_base64", "must be standard base64") from None
    if "mime_type" not in body:
        raise RuleError("mime_type", "is required")
    return SaveBody(
        data,
        check_mime_type(body["mime_type"]),
        body.get("custom_metadata"),
        check_display_name(body.get("display_name")),
    )
