"""Path segment rules for ``{app}``, ``{user}`` and ``{sid}`` (pure; no Django import).

App names are 1-63 characters from ``A-Z a-z 0-9 _ -``: every name Google ADK accepts for an
app or derives from a Python package, and nothing a URL has to escape. User and session ids
are client strings restricted to a safe charset: they start with a letter or digit (so
``.``/``..`` and leading separators are impossible), and carry no slash, whitespace, control
or non-ASCII character (no unicode look-alikes).
"""

from __future__ import annotations

import re

APP_NAME_PATTERN = r"[A-Za-z0-9_-]{1,63}"
APP_NAME_RULE = "1-63 characters from A-Z a-z 0-9 _ -"
ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}"
MAX_ID_LENGTH = 128
# Artifact names: the id charset, up to 256 characters, never ``..``; ``user:`` (the user's
# namespace) must be followed by a letter or digit.
ARTIFACT_NAME_PATTERN = r"(?!.*\.\.)(?!user:(?![A-Za-z0-9]))[A-Za-z0-9][A-Za-z0-9._:@-]{0,255}"

_RULES = {
    "app": (re.compile(rf"^{APP_NAME_PATTERN}\Z"), APP_NAME_RULE),
    "user": (
        re.compile(rf"^{ID_PATTERN}\Z"),
        "1-128 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
    ),
    "sid": (
        re.compile(rf"^{ID_PATTERN}\Z"),
        "1-128 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
    ),
    "name": (
        re.compile(rf"^{ARTIFACT_NAME_PATTERN}\Z"),
        "1-256 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit, "
        "without '..'; 'user:' is followed by a letter or digit",
    ),
    "prefix": (re.compile(r"^[a-z0-9]{10}\Z"), "the 10-character prefix of an API key"),
    "memory_id": (
        re.compile(
            r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
        ),
        "a UUID",
    ),
    "compaction_id": (
        re.compile(
            r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"
        ),
        "a UUID",
    ),
    "invocation": (
        re.compile(rf"^{ID_PATTERN}\Z"),
        "1-128 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
    ),
    "thread": (
        re.compile(rf"^{ID_PATTERN}\Z"),
        "1-128 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
    ),
    "checkpoint_id": (
        re.compile(rf"^{ID_PATTERN}\Z"),
        "1-128 characters from A-Z a-z 0-9 . _ : @ -, starting with a letter or digit",
    ),
    "fingerprint": (re.compile(r"^[0-9a-f]{64}\Z"), "a SHA-256 fingerprint: 64 lowercase hex"),
}
#: name -> (regular expression, description), for the OpenAPI schema.
PATH_PARAMETER_RULES = {name: (rule[0].pattern, rule[1]) for name, rule in _RULES.items()}


def path_segment_error(name: str, value: str) -> str | None:
    """The reason ``value`` is not a valid ``name`` segment, or None when it is valid."""
    rule = _RULES.get(name)
    if rule is None:
        return None
    pattern, description = rule
    if pattern.match(value):
        return None
    return f"{name} must be {description}"


#: The path parameter that follows each literal segment of the API's paths.
_PARAMETER_AFTER = {
    "apps": "app",
    "users": "user",
    "sessions": "sid",
    "artifacts": "name",
    "memories": "memory_id",
    "compactions": "compaction_id",
    "invocations": "invocation",
    "threads": "thread",
    "checkpoints": "checkpoint_id",
    "keys": "prefix",
    "tokens": "prefix",
    "tool-tokens": "prefix",
    "jobs": "job_id",
    "scopes": "fingerprint",
}
#: The diagnostics paths name their segments by position (/dev/v1/context/{app}/{user}/{sid}).
_POSITIONAL = {
    "context": ("app", "user", "sid"),
    "memory": ("app", "user"),
    "outbox": ("app",),
}


def encoded_slash_error(raw_path: str) -> tuple[str, str] | None:
    """The parameter, and why it is refused, of the first segment of a request's path as
    sent (still percent-encoded) that holds an encoded ``/``: the server decodes it before
    routing, so it would otherwise split one segment into two. None when there is none."""
    segments = raw_path.split("?", 1)[0].split("/")
    for position, segment in enumerate(segments):
        if "%2f" not in segment.lower():
            continue
        name = _PARAMETER_AFTER.get(segments[position - 1]) if position else None
        if name is None and segments[1:2] == ["dev"] and len(segments) > 3:
            names = _POSITIONAL.get(segments[3], ())
            offset = position - 4
            if 0 <= offset < len(names):
                name = names[offset]
        if name is None:
            return "path", "a path segment cannot hold '/'"
        return name, path_segment_error(name, "/") or f"{name} cannot hold '/'"
    return None
