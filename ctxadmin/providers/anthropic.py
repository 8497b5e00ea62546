"""Anthropic's wire format: ``messages`` for JSON replies (``complete_json``, with the schema
in the prompt, since the API has no structured-output parameter) and for turns with tools
(``generate``). Anthropic has no embeddings API.

Requests are built as ``transport.Request``; replies are read with ``wire``'s helpers, so a
malformed one is a ``provider_bad_response`` like every other kind's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ctxadmin.providers.base import Completion, Generation, ProviderConnection
from ctxadmin.providers.transport import Request, endpoint
from ctxadmin.providers.wire import (
    GenerateCall,
    JsonCall,
    bad,
    count,
    from_user_turn,
    function_call,
    generation,
    json_text,
    nonempty,
    reported_model,
    text_part,
)

API_VERSION = "/v1"
ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096

_FENCE = re.compile(r"\A\s*```(?:json|JSON)?[ \t]*\r?\n(.*?)\r?\n?\s*```\s*\Z", re.DOTALL)
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# Anthropic accepts only these characters in a tool_use id; ids from other providers or
# clients are mapped onto them the same way on both sides of a call and its result.
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_GENERATION_CONFIG_NAMES = {
    "temperature": "temperature",
    "top_p": "top_p",
    "stop_sequences": "stop_sequences",
}


def headers(api_key: str | None) -> dict[str, str]:
    result = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        result["x-api-key"] = api_key
    return result


def _content(envelope: dict[str, Any]) -> tuple[list, Any]:
    """(the reply's content blocks, its stop reason); a refusal is a bad response."""
    content = envelope.get("content")
    if not isinstance(content, list):
        raise bad("no content")
    stop_reason = envelope.get("stop_reason")
    if stop_reason == "refusal":
        raise bad("refusal")
    return content, stop_reason


# --------------------------------------------------------------------------- JSON replies


def json_instruction(schema: Mapping[str, Any] | None) -> str:
    """What is appended to the prompt where the API has no structured-output parameter."""
    if schema is None:
        return "Reply with a single JSON object and nothing else: no prose, no code fence."
    return (
        "Reply with a single JSON object that matches this JSON Schema, and nothing else "
        "(no prose, no code fence):\n" + json.dumps(schema, ensure_ascii=False, sort_keys=True)
    )


def strip_json_fence(text: str) -> str:
    """The JSON inside a surrounding ```json … ``` fence, or ``text`` unchanged."""
    match = _FENCE.match(text)
    return match.group(1) if match else text


def json_request(connection: ProviderConnection, call: JsonCall) -> Request:
    url = endpoint(connection.base_url, API_VERSION, "/messages")
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
    return Request(url, headers(connection.api_key), body)


def json_parse(envelope: dict[str, Any], model: str) -> Completion:
    content, stop_reason = _content(envelope)
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
        text=nonempty(strip_json_fence(text), stop_reason),
        input_tokens=count(usage.get("input_tokens")),
        output_tokens=count(usage.get("output_tokens")),
        finish_reason=stop_reason if isinstance(stop_reason, str) else None,
        model=reported_model(envelope.get("model"), model),
    )


# --------------------------------------------------------------------------- turns with tools


def _id(value: str) -> str:
    return _ID_UNSAFE.sub("_", value)


def _blocks(content: dict) -> list[dict]:
    blocks: list[dict] = []
    for part in content["parts"]:
        # Anthropic refuses empty text blocks; another model's thoughts are not the reply.
        if part.get("thought"):
            continue
        if part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
        elif "function_call" in part:
            call = part["function_call"]
            blocks.append(
                {
                    "type": "tool_use",
                    "id": _id(call["id"]),
                    "name": call["name"],
                    "input": call.get("args", {}),
                }
            )
        elif "function_response" in part:
            response = part["function_response"]
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": _id(response["id"]),
                    "content": json_text(response.get("response", {})),
                }
            )
    return blocks


def _messages(call: GenerateCall) -> list[dict]:
    messages: list[dict] = []
    for content in from_user_turn(call.contents):
        blocks = _blocks(content)
        if not blocks:
            continue
        role = "assistant" if content["role"] == "model" else "user"
        if not messages and role == "assistant":
            # The first message is the user's: a leading model text (a compaction summary
            # of the turns before) is context the request opens with.
            role = "user"
        # Roles must alternate: consecutive contents of one role become one message.
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    if not messages:
        raise ValueError("contents hold nothing this provider accepts (text or function parts)")
    for message in messages:
        if message["role"] == "user":
            # Tool results come first in their message, before any text.
            message["content"].sort(key=lambda block: block["type"] != "tool_result")
    return messages


def generate_request(connection: ProviderConnection, call: GenerateCall) -> Request:
    url = endpoint(connection.base_url, API_VERSION, "/messages")
    body: dict[str, Any] = {
        "model": call.model,
        "max_tokens": call.config.get("max_output_tokens") or ANTHROPIC_DEFAULT_MAX_TOKENS,
        "messages": _messages(call),
    }
    if call.instructions:
        body["system"] = call.instructions
    if call.tools:
        declared = []
        for tool in call.tools:
            entry = {"name": tool["name"]}
            if tool.get("description"):
                entry["description"] = tool["description"]
            entry["input_schema"] = tool.get("parameters") or _EMPTY_OBJECT_SCHEMA
            declared.append(entry)
        body["tools"] = declared
    names = _GENERATION_CONFIG_NAMES
    body.update({names[key]: value for key, value in call.config.items() if key in names})
    return Request(url, headers(connection.api_key), body)


def generate_parse(envelope: dict[str, Any], model: str) -> Generation:
    content, stop_reason = _content(envelope)
    parts: list[dict] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            parts.append(function_call(block.get("id"), block.get("name"), block.get("input")))
        elif block.get("type") == "text" and (text := text_part(block.get("text"))) is not None:
            parts.append(text)
    usage = envelope.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return generation(
        parts,
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        cached_tokens=usage.get("cache_read_input_tokens"),
        finish_reason=stop_reason,
        model=reported_model(envelope.get("model"), model),
    )
