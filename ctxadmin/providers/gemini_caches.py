"""Gemini explicit caching over plain HTTP: ``cachedContents`` resources (create, delete,
update the TTL, find by display name) and the ``generateContent`` call that reads one.

``GeminiCaches`` speaks the wire format with the providers' shared client (the registry's
adapter, ``caching.adapters.GeminiCacheAdapter``, is built on it). Each call is bounded by
its ``timeout_s`` and its reply by a byte limit, and every failure is a ``ProviderError``
with the codes ``complete_json`` uses. A missing resource is told apart: Gemini answers a
deleted, expired or unknown name with 403 ``CachedContent not found (or permission
denied)`` (a 404 ``NOT_FOUND`` is read the same way), which ``delete`` reports as False and
the other calls raise as ``CachedContentGone`` (code ``provider_rejected``), never as an
authentication failure.

The ``ctxadmin.providers`` logger gets one line per call (``cache_call`` or
``cache_call_failed``) with the operation, model, status, sizes, token count and duration
only: never a resource name, a display name, a URL, the key or prefix text.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

import ctxadmin.providers.gemini as gemini
from ctxadmin.providers.base import ProviderError, validate_base_url
from ctxadmin.providers.transport import (
    decode_envelope,
    elapsed_ms,
    endpoint,
    read_error_body,
    read_provider_body,
    shared_client,
    status_error,
)
from ctxadmin.providers.wire import check_model, count, enum_like

logger = logging.getLogger("ctxadmin.providers")

DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024
DISPLAY_NAME_PREFIX = "ctxadmin-"
MAX_DISPLAY_NAME = 128
LIST_PAGE_SIZE = 100
#: ``find`` reads at most this many pages, so a provider that keeps paging cannot hold it.
MAX_LIST_PAGES = 50

RESOURCE_NAME = re.compile(r"cachedContents/[A-Za-z0-9_-]{1,256}")
_TIMESTAMP = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<fraction>\d{1,9}))?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})"
)
_MISSING_MESSAGE = "cachedcontent not found"


class CachedContentGone(ProviderError):
    """The named resource does not exist any more (deleted, expired or never made)."""

    def __init__(self, *, status: int):
        super().__init__("provider_rejected", status=status, detail="cached_content_not_found")


@dataclass(frozen=True)
class CachedContent:
    """What a create returned. ``name`` is private: never logged, serialised or shown."""

    name: str = field(repr=False)
    expires_at: datetime | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True)
class CachedGeneration:
    """A reply of ``generateContent`` that read a cache. ``input_tokens`` is Gemini's
    ``promptTokenCount``, which includes the ``cached_tokens`` read from the cache."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    finish_reason: str | None


# --------------------------------------------------------------------------- wire values


def duration(ttl_ms: int) -> str:
    """``ttl_ms`` as a protobuf ``Duration`` string: ``300000`` → ``"300s"``, ``1500`` →
    ``"1.5s"``, ``1`` → ``"0.001s"``."""
    if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool) or ttl_ms < 1:
        raise ValueError("ttl_ms must be a positive integer")
    seconds, millis = divmod(ttl_ms, 1000)
    if not millis:
        return f"{seconds}s"
    return f"{seconds}.{millis:03d}".rstrip("0") + "s"


def parse_timestamp(value: Any) -> datetime | None:
    """An RFC 3339 timestamp (``2026-09-07T02:18:17.023637828Z``) as an aware UTC datetime;
    None when missing or malformed. Digits past microseconds are dropped."""
    if not isinstance(value, str):
        return None
    match = _TIMESTAMP.fullmatch(value.strip())
    if match is None:
        return None
    fraction = (match["fraction"] or "").ljust(6, "0")[:6]
    zone = "+00:00" if match["zone"] in {"Z", "z"} else match["zone"]
    try:
        parsed = datetime.fromisoformat(f"{match['date']}T{match['time']}.{fraction}{zone}")
    except ValueError:
        return None
    return parsed.astimezone(UTC)


def display_name(tag: str) -> str:
    """The ``displayName`` that marks a resource as made under ``tag``."""
    if not isinstance(tag, str) or not tag:
        raise ValueError("tag must be a non-empty string")
    name = DISPLAY_NAME_PREFIX + tag
    if len(name) > MAX_DISPLAY_NAME:
        raise ValueError(f"tag must be at most {MAX_DISPLAY_NAME - len(DISPLAY_NAME_PREFIX)} chars")
    return name


def min_prefix_tokens(model: str) -> int:
    """Gemini's smallest cacheable prefix; unknown models get the largest known minimum."""
    model = model.removeprefix("models/")
    if model.startswith("gemini-2.5"):
        return 2048
    return 4096


def _model_resource(model: str) -> str:
    model = check_model(model)
    return model if model.startswith("models/") else f"models/{model}"


def _resource_path(name: str) -> str:
    if not isinstance(name, str) or not RESOURCE_NAME.fullmatch(name):
        raise ValueError("not a cachedContents resource name")
    return "/" + name


def _deadline(timeout_s: float) -> float:
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, int | float)
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise ValueError("timeout_s must be a positive number")
    return time.monotonic() + timeout_s


def _bad(status: int, detail: str) -> ProviderError:
    return ProviderError("provider_bad_response", status=status, detail=detail)


def _names_missing_cache(response: httpx.Response) -> bool:
    """Whether a 403/404 says the resource is gone (and not that the key is refused)."""
    body = read_error_body(response)
    if body is None:
        return False
    try:
        error = json.loads(body)["error"]
        message = error.get("message")
        status = error.get("status")
    except (ValueError, UnicodeDecodeError, TypeError, KeyError, AttributeError):
        return False
    if isinstance(message, str) and message.lower().startswith(_MISSING_MESSAGE):
        return True
    return response.status_code == 404 and status == "NOT_FOUND"


# --------------------------------------------------------------------------- the client


@dataclass(frozen=True)
class _Reply:
    status: int
    body: dict[str, Any]
    gone: bool = False


@contextmanager
def _call_log(operation: str, model: str | None) -> Iterator[dict[str, Any]]:
    """Yields the log fields a call fills in; logs one line when it ends."""
    fields: dict[str, Any] = {
        "provider": "gemini",
        "operation": operation,
        "model": model,
        "status": None,
        "request_bytes": 0,
        "response_bytes": 0,
        "cached_tokens": None,
    }
    started = time.monotonic()
    try:
        yield fields
    except ProviderError as exc:
        logger.warning(
            "cache_call_failed",
            extra={
                **fields,
                "code": exc.code,
                "status": exc.status,
                "duration_ms": elapsed_ms(started),
            },
        )
        raise
    logger.info("cache_call", extra={**fields, "duration_ms": elapsed_ms(started)})


class GeminiCaches:
    """Explicit caches of the Gemini API (``/v1beta/cachedContents``)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ):
        validate_base_url(base_url, where="CTXADMIN_GEMINI_BASE_URL")
        if (
            not isinstance(max_response_bytes, int)
            or isinstance(max_response_bytes, bool)
            or max_response_bytes < 1024
        ):
            raise ValueError("max_response_bytes must be an integer >= 1024")
        self.base_url = base_url
        self._api_key = api_key or None
        self.max_response_bytes = max_response_bytes

    def __repr__(self) -> str:
        host = urlsplit(self.base_url).hostname
        key = "set" if self._api_key else "unset"
        return f"{type(self).__name__}(host={host!r}, api_key={key})"

    # ------------------------------------------------------------------ resources

    def create_cache(
        self,
        *,
        model: str,
        system_instruction: str | None,
        contents: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        tool_config: dict[str, Any] | None,
        ttl_ms: int,
        tag: str,
        timeout_s: float,
    ) -> CachedContent:
        """Create the resource, marked with ``tag``. A timeout does not mean nothing was
        made: ``find(tag)`` returns resources whose create the caller gave up on."""
        body: dict[str, Any] = {"model": _model_resource(model)}
        if system_instruction:
            body["systemInstruction"] = {"parts": [{"text": system_instruction}]}
        if contents:
            body["contents"] = list(contents)
        if tools:
            body["tools"] = list(tools)
        if tool_config is not None:
            body["toolConfig"] = tool_config
        body["ttl"] = duration(ttl_ms)
        body["displayName"] = display_name(tag)
        deadline = _deadline(timeout_s)
        with _call_log("create", model) as fields:
            reply = self._send("POST", "/cachedContents", fields, deadline, body=body)
            name = reply.body.get("name")
            if not isinstance(name, str) or not RESOURCE_NAME.fullmatch(name):
                raise _bad(reply.status, "no valid resource name")
            usage = reply.body.get("usageMetadata")
            cached = count(usage.get("totalTokenCount")) if isinstance(usage, dict) else None
            fields["cached_tokens"] = cached
        return CachedContent(
            name=name,
            expires_at=parse_timestamp(reply.body.get("expireTime")),
            cached_tokens=cached,
        )

    def delete(self, name: str, *, timeout_s: float) -> bool:
        """True when deleted now, False when Gemini says the resource is already gone."""
        path = _resource_path(name)
        deadline = _deadline(timeout_s)
        with _call_log("delete", None) as fields:
            reply = self._send("DELETE", path, fields, deadline, gone_ok=True, decode=False)
            fields["gone"] = reply.gone
        return not reply.gone

    def update_ttl(self, name: str, ttl_ms: int, *, timeout_s: float) -> datetime | None:
        """Give the resource ``ttl_ms`` from now; raises ``CachedContentGone`` if it is gone."""
        path = _resource_path(name)
        body = {"ttl": duration(ttl_ms)}
        deadline = _deadline(timeout_s)
        with _call_log("update_ttl", None) as fields:
            reply = self._send(
                "PATCH", path, fields, deadline, body=body, params={"updateMask": "ttl"}
            )
        return parse_timestamp(reply.body.get("expireTime"))

    def find(self, tag: str, *, timeout_s: float) -> list[str]:
        """Names of the live resources made under ``tag``, from at most ``MAX_LIST_PAGES``
        pages of the list; ``timeout_s`` bounds all pages together."""
        wanted = display_name(tag)
        deadline = _deadline(timeout_s)
        names: list[str] = []
        tokens: set[str] = set()
        token: str | None = None
        with _call_log("find", None) as fields:
            for pages in range(1, MAX_LIST_PAGES + 1):
                params = {"pageSize": str(LIST_PAGE_SIZE)}
                if token:
                    params["pageToken"] = token
                fields["pages"] = pages
                reply = self._send("GET", "/cachedContents", fields, deadline, params=params)
                items = reply.body.get("cachedContents", [])
                if not isinstance(items, list):
                    raise _bad(reply.status, "cachedContents is not a list")
                for item in items:
                    if not isinstance(item, dict) or item.get("displayName") != wanted:
                        continue
                    name = item.get("name")
                    if isinstance(name, str) and RESOURCE_NAME.fullmatch(name):
                        if name not in names:
                            names.append(name)
                token = reply.body.get("nextPageToken")
                if not isinstance(token, str) or not token or token in tokens:
                    fields["truncated"] = False
                    break
                tokens.add(token)
            else:
                fields["truncated"] = True
            fields["found"] = len(names)
        return names

    # ------------------------------------------------------------------ reading a cache

    def generate(
        self,
        *,
        model: str,
        resource_name: str,
        contents: list[dict[str, Any]],
        generation_config: dict[str, Any] | None = None,
        timeout_s: float,
    ) -> CachedGeneration:
        """``generateContent`` on ``model`` reading the cache ``resource_name``.

        The system instruction, tools and tool config live in the cache: Gemini refuses a
        request that sends any of them beside ``cachedContent``, so none is sent.
        """
        check_model(model)
        _resource_path(resource_name)
        if not isinstance(contents, list) or not contents:
            raise ValueError("contents must be a non-empty list")
        if generation_config is not None and not isinstance(generation_config, dict):
            raise ValueError("generation_config must be an object")
        body: dict[str, Any] = {"cachedContent": resource_name, "contents": contents}
        if generation_config is not None:
            body["generationConfig"] = generation_config
        model_id = quote(model.removeprefix("models/"), safe="")
        deadline = _deadline(timeout_s)
        with _call_log("generate", model) as fields:
            reply = self._send(
                "POST", f"/models/{model_id}:generateContent", fields, deadline, body=body
            )
            completion = gemini.json_parse(reply.body, model)
            usage = reply.body.get("usageMetadata")
            usage = usage if isinstance(usage, dict) else {}
            cached = count(usage.get("cachedContentTokenCount"))
            fields.update(
                cached_tokens=cached,
                input_tokens=completion.input_tokens,
                output_tokens=completion.output_tokens,
                finish_reason=enum_like(completion.finish_reason),
            )
        return CachedGeneration(
            text=completion.text,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            cached_tokens=cached,
            finish_reason=completion.finish_reason,
        )

    # ------------------------------------------------------------------ transport

    def _send(
        self,
        method: str,
        path: str,
        fields: dict[str, Any],
        deadline: float,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        gone_ok: bool = False,
        decode: bool = True,
    ) -> _Reply:
        """One request; its sizes and status are added to ``fields``. A reply saying the
        resource is gone is returned (``gone_ok``) or raised as ``CachedContentGone``."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ProviderError("provider_timeout", detail="deadline passed before the request")
        headers = {"accept": "application/json"}
        payload = b""
        if body is not None:
            try:
                payload = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
            except (TypeError, ValueError):
                raise ValueError("the request must be JSON-serialisable") from None
            headers["content-type"] = "application/json"
        if self._api_key:
            headers["x-goog-api-key"] = self._api_key
        fields["request_bytes"] += len(payload)
        url = endpoint(self.base_url, gemini.API_VERSION, path)
        try:
            with shared_client().stream(
                method,
                url,
                content=payload if body is not None else None,
                params=params,
                headers=headers,
                timeout=httpx.Timeout(remaining),
            ) as response:
                status = fields["status"] = response.status_code
                if status in {403, 404} and _names_missing_cache(response):
                    if gone_ok:
                        return _Reply(status, {}, gone=True)
                    raise CachedContentGone(status=status)
                failure = status_error(response, gemini.key_invalid)
                if failure is not None:
                    raise failure
                raw = read_provider_body(response, self.max_response_bytes, deadline)
        # ``from None``: httpx exceptions carry the request, whose URL names the resource.
        except httpx.TimeoutException:
            raise ProviderError("provider_timeout") from None
        except httpx.DecodingError:
            raise ProviderError("provider_bad_response", detail="undecodable body") from None
        except httpx.TransportError as exc:
            raise ProviderError("provider_unavailable", detail=type(exc).__name__) from None
        except httpx.HTTPError as exc:
            raise ProviderError("provider_bad_response", detail=type(exc).__name__) from None
        fields["response_bytes"] += len(raw)
        if not decode:
            return _Reply(status, {})
        return _Reply(status, decode_envelope(raw, status))
