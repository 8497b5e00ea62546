"""The HTTP transport every provider call shares (models, embeddings, caches): one kept-alive
client per process, endpoint joining, bounded body reads, the mapping of HTTP failures to
coded errors, and the one content-free log line per model call.

The ``ctxadmin.providers`` logger records one line per call with names, sizes, token counts
and durations only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ctxadmin.providers.base import (
    EmbeddingError,
    ProviderConnection,
    ProviderError,
    embedding_bad,
    parse_retry_after,
)

logger = logging.getLogger("ctxadmin.providers")

_clients: dict[int, httpx.Client] = {}
_clients_lock = threading.Lock()

# The reply's text arrives inside a JSON envelope, where escaping can multiply its size
# (quotes double, ``\uXXXX`` escapes up to six-fold for control characters); the envelope
# cap leaves room for that while still bounding memory. The text itself is then held to
# ``max_output_bytes`` exactly.
_ENVELOPE_FACTOR = 4
_ENVELOPE_SLACK = 64 * 1024
ERROR_BODY_BYTES = 16 * 1024


@dataclass(frozen=True)
class Request:
    """One POST of a model call. ``key_invalid`` tells a refused key apart in a 400 reply's
    body, for a provider that answers a bad key so (Gemini)."""

    url: str
    headers: dict[str, str]
    body: dict[str, Any]
    key_invalid: Callable[[httpx.Response], bool] | None = None


def shared_client() -> httpx.Client:
    """This process's client, made on first use.

    One client keeps connections to a provider alive between calls (a TLS handshake can cost
    more than a short reply); keyed by process id so a forked worker never writes to sockets
    it inherited from its parent.
    """
    pid = os.getpid()
    client = _clients.get(pid)
    if client is None:
        with _clients_lock:
            client = _clients.get(pid)
            if client is None:
                client = _clients[pid] = httpx.Client(follow_redirects=False)
    return client


def endpoint(base_url: str, version: str, path: str) -> str:
    """``base_url`` + ``version`` + ``path``, keeping any query; a base ending in the version
    (``https://host/v1``) does not get it twice."""
    parts = urlsplit(base_url)
    base_path = parts.path.rstrip("/")
    if not base_path.endswith(version):
        base_path += version
    return urlunsplit((parts.scheme, parts.netloc, base_path + path, parts.query, ""))


def read_capped(
    response: httpx.Response,
    cap: int,
    deadline: float,
    *,
    too_large: Callable[[str], Exception],
    timed_out: Callable[[], Exception],
) -> bytes:
    """The (decompressed) body, refused as soon as it passes ``cap`` bytes (``too_large``
    gets a content-free detail) or the deadline (``timed_out``)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large(f"response_bytes={declared} limit={cap}")
    chunks: list[bytes] = []
    total = 0
    for chunk in response.iter_bytes():
        total += len(chunk)
        if total > cap:
            raise too_large(f"response_bytes>{cap}")
        # Each read is bounded by the timeout computed at the start; this bounds the sum.
        if time.monotonic() > deadline:
            raise timed_out()
        chunks.append(chunk)
    return b"".join(chunks)


def elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a ``time.monotonic()`` reading), for call logs."""
    return round((time.monotonic() - started) * 1000)


def read_error_body(response: httpx.Response) -> bytes | None:
    """An error reply's body for a provider's enum fields, or None past ``ERROR_BODY_BYTES``."""
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > ERROR_BODY_BYTES:
            return None
    return body


# --------------------------------------------------------------------------- model calls


def logged_call(
    connection: ProviderConnection,
    request: Request,
    deadline: float,
    fields: dict[str, Any],
    parse: Callable[[dict[str, Any]], Any],
    describe: Callable[[Any], tuple[int, dict[str, Any]]],
    *,
    unserialisable: str = "the schema must be JSON-serialisable",
):
    """POST the request, ``parse`` the envelope, hold the output to the connection's byte
    limit, and log one content-free line either way: ``describe(result)`` gives the output's
    bytes and the line's other fields (counts only). ``unserialisable`` is the ValueError's
    message when the body cannot be encoded."""
    started = time.monotonic()
    try:
        try:
            status, envelope, sizes = post(connection, request, deadline)
        except ValueError:
            raise ValueError(unserialisable) from None
        result = parse(envelope)
        output_bytes, described = describe(result)
        if output_bytes > connection.max_output_bytes:
            raise ProviderError(
                "provider_output_too_large",
                status=status,
                detail=f"output_bytes={output_bytes} limit={connection.max_output_bytes}",
            )
    except ProviderError as exc:
        logger.warning(
            "provider_call_failed",
            extra={
                **fields,
                "code": exc.code,
                "status": exc.status,
                "duration_ms": elapsed_ms(started),
            },
        )
        raise
    logger.info(
        "provider_call",
        extra={
            **fields,
            "status": status,
            "duration_ms": elapsed_ms(started),
            "request_bytes": sizes[0],
            "response_bytes": sizes[1],
            "output_bytes": output_bytes,
            **described,
        },
    )
    return result


def post(
    connection: ProviderConnection, request: Request, deadline: float
) -> tuple[int, dict[str, Any], tuple[int, int]]:
    """POST the request; the status, the decoded envelope and (request, response) byte sizes."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ProviderError("provider_timeout", detail="deadline passed before the request")
    try:
        payload = json.dumps(request.body, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError):
        raise ValueError("the schema must be JSON-serialisable") from None
    headers = {
        **request.headers,
        "content-type": "application/json",
        "accept": "application/json",
    }
    cap = connection.max_output_bytes * _ENVELOPE_FACTOR + _ENVELOPE_SLACK
    try:
        with shared_client().stream(
            "POST",
            request.url,
            content=payload,
            headers=headers,
            timeout=httpx.Timeout(remaining),
        ) as response:
            failure = status_error(response, request.key_invalid)
            if failure is not None:
                raise failure
            raw = read_provider_body(response, cap, deadline)
            status = response.status_code
    # ``from None``: httpx exceptions carry the request, whose URL may hold a token.
    except httpx.TimeoutException:
        raise ProviderError("provider_timeout") from None
    except httpx.DecodingError:
        raise ProviderError("provider_bad_response", detail="undecodable body") from None
    except httpx.TransportError as exc:
        raise ProviderError("provider_unavailable", detail=type(exc).__name__) from None
    except httpx.HTTPError as exc:
        raise ProviderError("provider_bad_response", detail=type(exc).__name__) from None
    return status, decode_envelope(raw, status), (len(payload), len(raw))


def status_error(
    response: httpx.Response, key_invalid: Callable[[httpx.Response], bool] | None = None
) -> ProviderError | None:
    """The error a non-2xx status stands for.

    Error bodies may echo the prompt and are not kept; the one exception is a 400 that
    ``key_invalid`` reads for a refused key (Gemini's ``reason: API_KEY_INVALID``).
    """
    status = response.status_code
    if 200 <= status < 300:
        return None
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    if status == 429:
        return ProviderError("provider_rate_limited", status=status, retry_after_s=retry_after)
    if status in {401, 403} or (
        status == 400 and key_invalid is not None and key_invalid(response)
    ):
        return ProviderError("provider_auth_failed", status=status)
    if 400 <= status < 500:
        return ProviderError("provider_rejected", status=status)
    if status >= 500:
        return ProviderError("provider_unavailable", status=status, retry_after_s=retry_after)
    return ProviderError("provider_bad_response", status=status, detail="unexpected status")


def read_provider_body(response: httpx.Response, cap: int, deadline: float) -> bytes:
    """``read_capped`` with the model calls' errors."""
    status = response.status_code
    return read_capped(
        response,
        cap,
        deadline,
        too_large=lambda detail: ProviderError(
            "provider_output_too_large", status=status, detail=detail
        ),
        timed_out=lambda: ProviderError("provider_timeout", status=status),
    )


def decode_envelope(raw: bytes, status: int) -> dict[str, Any]:
    try:
        envelope = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ProviderError("provider_bad_response", status=status, detail="not JSON") from None
    if not isinstance(envelope, dict):
        raise ProviderError("provider_bad_response", status=status, detail="not a JSON object")
    return envelope


# --------------------------------------------------------------------------- embedding calls


@dataclass(frozen=True)
class EmbeddingReply:
    status: int
    envelope: dict[str, Any]
    request_bytes: int
    response_bytes: int


def post_embeddings(
    url: str, headers: dict[str, str], body: dict[str, Any], *, deadline: float, cap: int
) -> EmbeddingReply:
    """POST one embeddings call; failures are ``EmbeddingError`` (error bodies not read)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise EmbeddingError("embedding_timeout", detail="deadline passed before the request")
    payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = {**headers, "content-type": "application/json", "accept": "application/json"}
    try:
        with shared_client().stream(
            "POST", url, content=payload, headers=headers, timeout=httpx.Timeout(remaining)
        ) as response:
            status = response.status_code
            if not 200 <= status < 300:
                # Error bodies may echo the input: they are not read.
                retry_after = parse_retry_after(response.headers.get("retry-after"))
                if status == 429:
                    raise EmbeddingError(
                        "embedding_rate_limited", status=status, retry_after_s=retry_after
                    )
                raise EmbeddingError(
                    "embedding_provider_error",
                    status=status,
                    retry_after_s=retry_after if status >= 500 else None,
                )
            raw = read_capped(
                response,
                cap,
                deadline,
                too_large=lambda detail: embedding_bad(detail, status),
                timed_out=lambda: EmbeddingError("embedding_timeout", status=status),
            )
    # ``from None``: httpx exceptions carry the request, whose URL may hold a token.
    except httpx.TimeoutException:
        raise EmbeddingError("embedding_timeout") from None
    except httpx.DecodingError:
        raise embedding_bad("undecodable body") from None
    except httpx.TransportError as exc:
        raise EmbeddingError("embedding_provider_error", detail=type(exc).__name__) from None
    except httpx.HTTPError as exc:
        raise embedding_bad(type(exc).__name__) from None
    try:
        envelope = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise embedding_bad("not JSON", status) from None
    if not isinstance(envelope, dict):
        raise embedding_bad("not a JSON object", status)
    return EmbeddingReply(status, envelope, len(payload), len(raw))
