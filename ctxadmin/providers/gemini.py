"""Gemini's wire format: ``generateContent`` for JSON replies (``complete_json``) and for
turns with tools (``generate``), ``batchEmbedContents`` for embeddings, and the 400 reply
that stands for a refused key. The ``cachedContents`` resources are in ``gemini_caches``.

Requests are built as ``transport.Request``; replies are read with ``wire``'s helpers, so a
malformed one is a ``provider_bad_response`` like every other kind's.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx

from ctxadmin.providers.base import Completion, Generation, ProviderConnection, embedding_bad
from ctxadmin.providers.transport import Request, endpoint, read_error_body
from ctxadmin.providers.wire import (
    GenerateCall,
    JsonCall,
    bad,
    count,
    enum_like,
    from_user_turn,
    function_call,
    generation,
    nonempty,
    reported_model,
    text_part,
)

API_VERSION = "/v1beta"
#: The API takes at most this many requests per ``batchEmbedContents``.
EMBED_MAX_BATCH = 100

_GENERATION_CONFIG_NAMES = {
    "temperature": "temperature",
    "max_output_tokens": "maxOutputTokens",
    "top_p": "topP",
    "stop_sequences": "stopSequences",
    "seed": "seed",
}


def headers(api_key: str | None) -> dict[str, str]:
    return {"x-goog-api-key": api_key} if api_key else {}


def generate_content_url(base_url: str, model: str) -> str:
    model_id = quote(model.removeprefix("models/"), safe="")
    return endpoint(base_url, API_VERSION, f"/models/{model_id}:generateContent")


def key_invalid(response: httpx.Response) -> bool:
    """Whether a 400 says the key is refused: told apart only by an enum in the body
    (``reason: API_KEY_INVALID``)."""
    body = read_error_body(response)
    if body is None:
        return False
    try:
        details = json.loads(body)["error"]["details"]
        return any(isinstance(d, dict) and d.get("reason") == "API_KEY_INVALID" for d in details)
    except (ValueError, UnicodeDecodeError, TypeError, KeyError):
        return False


def candidate_parts(envelope: dict[str, Any]) -> tuple[Any, list]:
    """(the first candidate's finish reason, its raw parts) of a generateContent reply; a
    blocked prompt, no candidate or a candidate without parts is ``provider_bad_response``."""
    feedback = envelope.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        reason = enum_like(feedback.get("blockReason"))
        raise bad("prompt blocked" + (f" block_reason={reason}" if reason else ""))
    candidates = envelope.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        raise bad("no candidates")
    candidate = candidates[0]
    finish_reason = candidate.get("finishReason")
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        reason = enum_like(finish_reason)
        raise bad("candidate without parts" + (f" finish_reason={reason}" if reason else ""))
    return finish_reason, parts


# --------------------------------------------------------------------------- JSON replies


def json_request(connection: ProviderConnection, call: JsonCall) -> Request:
    url = generate_content_url(connection.base_url, call.model)
    # ``responseJsonSchema`` takes JSON Schema as is; ``responseSchema`` is an OpenAPI subset
    # that refuses ``additionalProperties`` and ``$ref``.
    config: dict[str, Any] = {
        "responseMimeType": "application/json",
        "temperature": call.temperature,
    }
    if call.schema is not None:
        config["responseJsonSchema"] = call.schema
    if call.max_output_tokens is not None:
        config["maxOutputTokens"] = call.max_output_tokens
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": call.prompt}]}],
        "generationConfig": config,
    }
    if call.system:
        body["systemInstruction"] = {"parts": [{"text": call.system}]}
    return Request(url, headers(connection.api_key), body, key_invalid=key_invalid)


def json_parse(envelope: dict[str, Any], model: str) -> Completion:
    finish_reason, parts = candidate_parts(envelope)
    # Thought summaries (``"thought": true``) are not the answer.
    text = "".join(
        part["text"]
        for part in parts
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")
    )
    usage = envelope.get("usageMetadata")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(
        text=nonempty(text, finish_reason),
        input_tokens=count(usage.get("promptTokenCount")),
        output_tokens=count(usage.get("candidatesTokenCount")),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=reported_model(envelope.get("modelVersion"), model),
    )


# --------------------------------------------------------------------------- turns with tools


def _part(part: dict) -> dict:
    """A part on Gemini's wire, with its thought and thought signature (Gemini wants the
    signature back on the part that carried it, or refuses a function-calling turn)."""
    wire = _data(part)
    if part.get("thought") is not None:
        wire["thought"] = part["thought"]
    if part.get("thought_signature") is not None:
        wire["thoughtSignature"] = part["thought_signature"]
    return wire


def _data(part: dict) -> dict:
    if "text" in part:
        return {"text": part["text"]}
    if "function_call" in part:
        call = part["function_call"]
        return {
            "functionCall": {"id": call["id"], "name": call["name"], "args": call.get("args", {})}
        }
    if "function_response" in part:
        response = part["function_response"]
        return {
            "functionResponse": {
                "id": response["id"],
                "name": response["name"],
                "response": response.get("response", {}),
            }
        }
    if "inline_data" in part:
        data = part["inline_data"]
        return {"inlineData": {"mimeType": data.get("mime_type"), "data": data.get("data")}}
    data = part["file_data"]
    return {"fileData": {"mimeType": data.get("mime_type"), "fileUri": data.get("file_uri")}}


def generate_request(connection: ProviderConnection, call: GenerateCall) -> Request:
    url = generate_content_url(connection.base_url, call.model)
    body: dict[str, Any] = {
        "contents": [
            {"role": content["role"], "parts": [_part(part) for part in content["parts"]]}
            # A cache's first new turn may continue the cached ones.
            for content in (
                call.contents if call.cached_content is not None else from_user_turn(call.contents)
            )
        ]
    }
    if call.cached_content is not None:
        # The cache holds the instructions and tools; Gemini refuses them next to it.
        body["cachedContent"] = call.cached_content
    else:
        if call.instructions:
            body["systemInstruction"] = {"parts": [{"text": call.instructions}]}
        if call.tools:
            # ``parametersJsonSchema`` takes JSON Schema as is; ``parameters`` is an OpenAPI
            # subset that refuses ``additionalProperties`` and ``$ref``.
            declarations = []
            for tool in call.tools:
                declaration = {"name": tool["name"]}
                if tool.get("description"):
                    declaration["description"] = tool["description"]
                if "parameters" in tool:
                    declaration["parametersJsonSchema"] = tool["parameters"]
                declarations.append(declaration)
            body["tools"] = [{"functionDeclarations": declarations}]
    config = {_GENERATION_CONFIG_NAMES[key]: value for key, value in call.config.items()}
    if config:
        body["generationConfig"] = config
    return Request(url, headers(connection.api_key), body, key_invalid=key_invalid)


def generate_parse(envelope: dict[str, Any], model: str) -> Generation:
    finish_reason, raw_parts = candidate_parts(envelope)
    parts: list[dict] = []
    for raw in raw_parts:
        # Thought summaries (``"thought": true``) are not the answer.
        if not isinstance(raw, dict) or raw.get("thought"):
            continue
        if isinstance(raw.get("functionCall"), dict):
            call = raw["functionCall"]
            part = function_call(call.get("id"), call.get("name"), call.get("args"))
        elif (text := text_part(raw.get("text"))) is not None:
            part = text
        else:
            continue
        if isinstance(raw.get("thoughtSignature"), str) and raw["thoughtSignature"]:
            part["thought_signature"] = raw["thoughtSignature"]
        parts.append(part)
    usage = envelope.get("usageMetadata")
    usage = usage if isinstance(usage, dict) else {}
    return generation(
        parts,
        input_tokens=usage.get("promptTokenCount"),
        output_tokens=usage.get("candidatesTokenCount"),
        cached_tokens=usage.get("cachedContentTokenCount"),
        finish_reason=finish_reason,
        model=reported_model(envelope.get("modelVersion"), model),
    )


# --------------------------------------------------------------------------- embeddings


def embed_request(
    connection: ProviderConnection, model: str, texts: list[str], *, dimension: int
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(url, headers, body) of ``batchEmbedContents`` for ``model`` (without ``models/``),
    asking for ``outputDimensionality = dimension``."""
    model_id = quote(model, safe="")
    url = endpoint(connection.base_url, API_VERSION, f"/models/{model_id}:batchEmbedContents")
    resource = f"models/{model}"
    body = {
        "requests": [
            {
                "model": resource,
                "content": {"parts": [{"text": text}]},
                "outputDimensionality": dimension,
            }
            for text in texts
        ]
    }
    return url, headers(connection.api_key), body


def embed_parse(envelope: dict[str, Any], count_: int, status: int) -> list[Any]:
    """The vectors of a ``batchEmbedContents`` reply, in input order (not yet checked)."""
    from_reply = envelope.get("embeddings")
    if not isinstance(from_reply, list):
        raise embedding_bad("no embeddings", status)
    if len(from_reply) != count_:
        raise embedding_bad(f"vectors={len(from_reply)} inputs={count_}", status)
    if not all(isinstance(item, dict) and "values" in item for item in from_reply):
        raise embedding_bad("embedding without values", status)
    return [item["values"] for item in from_reply]
