"""One API call as data: what to send and how to read the answer. The operation modules
build these; the sync and async transports send them."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

PREFIX = "/api/v1/apps"

JSON = dict[str, Any]


def path(app: str, *segments: str | int) -> str:
    """``/api/v1/apps/{app}/...`` with every segment percent-encoded (a segment never
    carries a ``/``)."""
    parts = [quote(str(s), safe=":@") for s in (app, *segments)]
    return f"{PREFIX}/" + "/".join(parts)


def user_path(app: str, user_id: str, *segments: str | int) -> str:
    return path(app, "users", user_id, *segments)


def session_path(app: str, user_id: str, session_id: str, *segments: str | int) -> str:
    return path(app, "users", user_id, "sessions", session_id, *segments)


def body(**fields: Any) -> JSON:
    """A JSON body of the fields that were given (None means: not sent)."""
    return {key: value for key, value in fields.items() if value is not None}


def query(**params: Any) -> dict[str, str]:
    """Query parameters of the values given; booleans as ``true``/``false``, lists joined
    by commas (the API's form for its list filters)."""
    found: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            found[key] = "true" if value else "false"
        elif isinstance(value, list | tuple | set | frozenset):
            found[key] = ",".join(str(v) for v in value)
        else:
            found[key] = str(value)
    return found


def json_of(response: httpx.Response) -> Any:
    return response.json() if response.content else None


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    # A list value is a repeated parameter (``?prefix=a&prefix=b``).
    params: Mapping[str, str | list[str]] | None = None
    json: Any = None
    content: bytes | None = None
    headers: Mapping[str, str] | None = None
    # None: by method (GET, PUT, DELETE are); True for the POSTs the API makes idempotent.
    idempotent: bool | None = None
    read: Callable[[httpx.Response], Any] = field(default=json_of)


def with_bytes(response: httpx.Response) -> JSON:
    """An artifact's JSON answer with its ``data_base64`` decoded into ``data``."""
    found = dict(response.json())
    found["data"] = base64.b64decode(found.get("data_base64") or "")
    return found


def raw_bytes(response: httpx.Response) -> bytes:
    return response.content


def nothing(response: httpx.Response) -> None:
    return None
