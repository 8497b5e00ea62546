"""One call to a model provider that asks for JSON output, over plain HTTP.

``complete_json`` speaks three wire formats (Gemini ``generateContent``, OpenAI-compatible
``chat/completions``, Anthropic ``messages``), bounds the call by an absolute deadline and
the reply by a byte limit, and turns every failure into a ``ProviderError`` with a stable
code. It never retries: whether a rate limit or an outage is worth another attempt is the
caller's decision, made against its own budget.

The ``ctxadmin.providers`` logger records one line per call with names, sizes, token counts
and durations only.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from ctxadmin.providers.base import Completion, ProviderConnection, ProviderError, parse_retry_after
from ctxadmin.providers.transport import elapsed_ms, endpoint, read_capped, shared_client

logger = logging.getLogger("ctxadmin.providers")

# The reply's text arrives inside a JSON envelope, where escaping can multiply its size
# (quotes double, ``\uXXXX`` escapes up to six-fold for control characters); the envelope
# cap leaves room for that while still bounding memory. The text itself is then held to
# ``max_output_bytes`` exactly.
_ENVELOPE_FACTOR = 4
_ENVELOPE_SLACK = 64 * 1024
_ERROR_BODY_BYTES = 16 * 1024

ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
OPENAI_SCHEMA_NAME = "summary"

_ENUM_LIKE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_FENCE = re.compile(r"\A\s*```(?:json|JSON)?[ \t]*\r?\n(.*?)\r?\n?\s*```\s*\Z", re.DOTALL)


@dataclass(frozen=True)
class _Request:
    url: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class _Call:
    """What a wire format needs to build a request; the same for every kind."""

    model: str
    system: str
    prompt: str
    schema: Mapping[str, Any] | None
    max_output_tokens: int | None
    temperature: float


def complete_json(
    connection: ProviderConnection,
    *,
    model: str,
    system: str,
    prompt: str,
    schema: Mapping[str, Any] | None,
    deadline: float,
    max_output_tokens: int | None = None,
    temperature: float = 0.0,
) -> Completion:
    """Ask ``model`` for a JSON reply matching ``schema``; ``deadline`` is a ``time.monotonic()``.

    The returned text is the model's JSON as sent, not yet parsed: validating it against the
    schema is the caller's job, since only the caller knows what to do with a near miss.
    Raises ``ProviderError`` for every failure of the call or of the reply's shape, and
    ``ValueError`` for arguments no provider could accept.
    """
    call = _Call(
        model=_check_model(model),
        system=system,
        prompt=prompt,
        schema=schema,
        max_output_tokens=_check_max_tokens(max_output_tokens),
        temperature=_check_temperature(temperature),
    )
    build, parse = _WIRE_FORMATS[connection.kind]
    request = build(connection, call)
    fields: dict[str, Any] = {
        "connection": connection.name,
        "kind": connection.kind,
        "model": model,
    }
    return logged_call(
        connection,
        request,
        deadline,
        fields,
        lambda envelope: parse(envelope, model),
        lambda completion: (
            len(completion.text.encode("utf-8")),
            {
                "input_tokens": completion.input_tokens,
                "output_tokens": completion.output_tokens,
                "finish_reason": _enum_like(completion.finish_reason),
            },
        ),
    )


def logged_call(
    connection: ProviderConnection,
    request: _Request,
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
            status, envelope, sizes = _post(connection, request, deadline)
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


# --------------------------------------------------------------------------- arguments


def _check_model(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ValueError("model must be a non-empty string")
    return model


def _check_max_tokens(value: int | None) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("max_output_tokens must be a positive integer")
    return value


def _check_temperature(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("temperature must be a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError("temperature must be a finite number >= 0")
    return float(value)


# --------------------------------------------------------------------------- transport


def _post(
    connection: ProviderConnection, request: _Request, deadline: float
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
            failure = _status_error(response, connection.kind)
            if failure is not None:
                raise failure
            raw = _read_capped(response, cap, deadline)
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
    return status, _decode_envelope(raw, status), (len(payload), len(raw))


def _status_error(response: httpx.Response, kind: str) -> ProviderError | None:
    """The error a non-2xx status stands for.

    Error bodies may echo the prompt and are not kept; the one exception is Gemini's 400 for
    a bad key, told apart only by an enum in the body (``reason: API_KEY_INVALID``).
    """
    status = response.status_code
    if 200 <= status < 300:
        return None
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    if status == 429:
        return ProviderError("provider_rate_limited", status=status, retry_after_s=retry_after)
    if status in {401, 403} or (
        kind == "gemini" and status == 400 and _gemini_key_invalid(response)
    ):
        return ProviderError("provider_auth_failed", status=status)
    if 400 <= status < 500:
        return ProviderError("provider_rejected", status=status)
    if status >= 500:
        return ProviderError("provider_unavailable", status=status, retry_after_s=retry_after)
    return ProviderError("provider_bad_response", status=status, detail="unexpected status")


def _gemini_key_invalid(response: httpx.Response) -> bool:
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > _ERROR_BODY_BYTES:
            return False
    try:
        details = json.loads(body)["error"]["details"]
        return any(isinstance(d, dict) and d.get("reason") == "API_KEY_INVALID" for d in details)
    except (ValueError, UnicodeDecodeError, TypeError, KeyError):
        return False


def _read_capped(response: httpx.Response, cap: int, deadline: float) -> bytes:
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


def _decode_envelope(raw: bytes, status: int) -> dict[str, Any]:
    try:
        envelope = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ProviderError("provider_bad_response", status=status, detail="not JSON") from None
    if not isinstance(envelope, dict):
        raise ProviderError("provider_bad_response", status=status, detail="not a JSON object")
    return envelope


# --------------------------------------------------------------------------- reply helpers


def _bad(detail: str) -> ProviderError:
    return ProviderError("provider_bad_response", status=200, detail=detail)


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _enum_like(value: Any) -> str | None:
    """A provider's enum value (finish reason, block reason), or None for anything free-form."""
    if isinstance(value, str) and _ENUM_LIKE.fullmatch(value):
        return value
    return None


def _reported_model(value: Any, requested: str) -> str:
    return value if isinstance(value, str) and value else requested


def _nonempty(text: str, finish_reason: Any) -> str:
    if not text.strip():
        reason = _enum_like(finish_reason)
        raise _bad("empty text" + (f" finish_reason={reason}" if reason else ""))
    return text


# --------------------------------------------------------------------------- gemini


def _gemini_request(connection: ProviderConnection, call: _Call) -> _Request:
    model_id = quote(call.model.removeprefix("models/"), safe="")
    url = endpoint(connection.base_url, "/v1beta", f"/models/{model_id}:generateContent")
    # ``responseJsonSchema`` takes JSON Schema as is; ``responseSchema`` is an OpenAPI subset
    # that refuses ``additionalProperties`` and ``$ref``.
    generation: dict[str, Any] = {
        "responseMimeType": "application/json",
        "temperature": call.temperature,
    }
    if call.schema is not None:
        generation["responseJsonSchema"] = call.schema
    if call.max_output_tokens is not None:
        generation["maxOutputTokens"] = call.max_output_tokens
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": call.prompt}]}],
        "generationConfig": generation,
    }
    if call.system:
        body["systemInstruction"] = {"parts": [{"text": call.system}]}
    headers = {"x-goog-api-key": connection.api_key} if connection.api_key else {}
    return _Request(url, headers, body)


def gemini_candidate_parts(envelope: dict[str, Any]) -> tuple[Any, list]:
    """(the first candidate's finish reason, its raw parts) of a generateContent reply; a
    blocked prompt, no candidate or a candidate without parts is ``provider_bad_response``."""
    feedback = envelope.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        reason = _enum_like(feedback.get("blockReason"))
        raise _bad("prompt blocked" + (f" block_reason={reason}" if reason else ""))
    candidates = envelope.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        raise _bad("no candidates")
    candidate = candidates[0]
    finish_reason = candidate.get("finishReason")
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        reason = _enum_like(finish_reason)
        raise _bad("candidate without parts" + (f" finish_reason={reason}" if reason else ""))
    return finish_reason, parts


def _gemini_parse(envelope: dict[str, Any], model: str) -> Completion:
    finish_reason, parts = gemini_candidate_parts(envelope)
    # Thought summaries (``"thought": true``) are not the answer.
    text = "".join(
        part["text"]
        for part in parts
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")
    )
    usage = envelope.get("usageMetadata")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(
        text=_nonempty(text, finish_reason),
        input_tokens=_count(usage.get("promptTokenCount")),
        output_tokens=_count(usage.get("candidatesTokenCount")),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=_reported_model(envelope.get("modelVersion"), model),
    )


# --------------------------------------------------------------------------- openai-compatible


def _openai_request(connection: ProviderConnection, call: _Call) -> _Request:
    url = endpoint(connection.base_url, "/v1", "/chat/completions")
    messages = []
    if call.system:
        messages.append({"role": "system", "content": call.system})
    messages.append({"role": "user", "content": call.prompt})
    body: dict[str, Any] = {
        "model": call.model,
        "messages": messages,
        "temperature": call.temperature,
    }
    if call.max_output_tokens is not None:
        body["max_tokens"] = call.max_output_tokens
    if call.schema is not None:
        # ``strict: false``: OpenAI's strict mode refuses any schema that does not list every
        # property as required and set ``additionalProperties: false``; a general schema need not.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": OPENAI_SCHEMA_NAME, "schema": call.schema, "strict": False},
        }
    else:
        body["response_format"] = {"type": "json_object"}
    headers = {"authorization": f"Bearer {connection.api_key}"} if connection.api_key else {}
    return _Request(url, headers, body)


def _openai_parse(envelope: dict[str, Any], model: str) -> Completion:
    choices = envelope.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad("no choices")
    choice = choices[0]
    finish_reason = choice.get("finish_reason")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _bad("choice without message")
    if message.get("refusal"):
        raise _bad("refusal")
    content = message.get("content")
    if isinstance(content, list):
        # A few compatible servers answer with content parts rather than a string.
        content = "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    if not isinstance(content, str):
        raise _bad("message without text content")
    usage = envelope.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(
        text=_nonempty(content, finish_reason),
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=_reported_model(envelope.get("model"), model),
    )


# --------------------------------------------------------------------------- anthropic


def json_instruction(schema: Mapping[str, Any] | None) -> str:
    """What is appended to the prompt where the API has no structured-output parameter."""
    if schema is None:
        return "Reply with a single JSON object and nothing else: no prose, no code fence."
    return (
        "Reply with a single JSON object that matches this JSON Schema, and nothing else "
        "(no prose, no code fence):\n" + json.dumps(schema, ensure_ascii=False, sort_keys=True)
    )


def _anthropic_request(connection: ProviderConnection, call: _Call) -> _Request:
    url = endpoint(connection.base_url, "/v1", "/messages")
    body: dict[str, Any] = {
        "model": call.model,
        "max_tokens": call.max_output_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS,
        "messages": [
            {"role": "user", "content": f"{call.prompt}\n\n{json_instruction(call.schema)}"}
        ],
        "temperature": call.temperature,
    }
    if call.system:
        body["system"] = call.system
    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if connection.api_key:
        headers["x-api-key"] = connection.api_key
    return _Request(url, headers, body)


def strip_json_fence(text: str) -> str:
    """The JSON inside a surrounding ```json … ``` fence, or ``text`` unchanged."""
    match = _FENCE.match(text)
    return match.group(1) if match else text


def _anthropic_parse(envelope: dict[str, Any], model: str) -> Completion:
    content = envelope.get("content")
    if not isinstance(content, list):
        raise _bad("no content")
    stop_reason = envelope.get("stop_reason")
    if stop_reason == "refusal":
        raise _bad("refusal")
    text = "".join(
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )
    usage = envelope.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(
        text=_nonempty(strip_json_fence(text), stop_reason),
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
        finish_reason=stop_reason if isinstance(stop_reason, str) else None,
        model=_reported_model(envelope.get("model"), model),
    )


_WIRE_FORMATS: dict[
    str,
    tuple[
        Callable[[ProviderConnection, _Call], _Request],
        Callable[[dict[str, Any], str], Completion],
    ],
] = {
    "gemini": (_gemini_request, _gemini_parse),
    "openai_compatible": (_openai_request, _openai_parse),
    "anthropic": (_anthropic_request, _anthropic_parse),
}
