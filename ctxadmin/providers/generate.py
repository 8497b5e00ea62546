"""One model call with tools (function calling), over the same three wire formats as
``complete_json``: Gemini ``generateContent``, OpenAI-compatible ``chat/completions`` and
Anthropic ``messages``.

Contents, parts and tool declarations are in ctxadmin's session event format (see
``sessions_app.events``): ``{"role": "user"|"model", "parts": [...]}`` where a part is
``{"text"}``, ``{"function_call": {"id", "name", "args"}}``, ``{"function_response": {"id",
"name", "response"}}``, ``{"inline_data"}`` or ``{"file_data"}``. The reply comes back in the
same format, so a caller can store it as an event and send it again on the next turn.

Deadlines, byte limits, error codes and logging are those of ``complete_json``: one
content-free ``ctxadmin.providers`` log line per call, with ``operation: "generate"``.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ctxadmin.providers.base import ProviderConnection
from ctxadmin.providers.clients import (
    ANTHROPIC_DEFAULT_MAX_TOKENS,
    ANTHROPIC_VERSION,
    _bad,
    _check_max_tokens,
    _check_model,
    _check_temperature,
    _count,
    _enum_like,
    _reported_model,
    _Request,
    gemini_candidate_parts,
    logged_call,
)
from ctxadmin.providers.transport import endpoint

logger = logging.getLogger("ctxadmin.providers")

GENERATION_CONFIG_KEYS: frozenset[str] = frozenset(
    {"temperature", "max_output_tokens", "top_p", "stop_sequences", "seed"}
)
_TOOL_KEYS = frozenset({"name", "description", "parameters"})
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# Anthropic accepts only these characters in a tool_use id; ids from other providers or
# clients are mapped onto them the same way on both sides of a call and its result.
_ANTHROPIC_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Generation:
    """A model's turn: its parts in ctxadmin's event format, and accounting."""

    parts: list[dict]
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    finish_reason: str | None
    model: str


@dataclass(frozen=True)
class _GenerateCall:
    """What a wire format needs to build a request; checked, the same for every kind."""

    model: str
    instructions: str | None
    tools: list[dict]
    contents: list[dict]
    config: dict[str, Any]
    cached_content: str | None


def generate(
    connection: ProviderConnection,
    *,
    model: str,
    instructions: str | None,
    tools: list[dict],
    contents: list[dict],
    deadline: float,
    generation_config: dict | None = None,
    cached_content: str | None = None,
) -> Generation:
    """Ask ``model`` for its next turn; ``deadline`` is a ``time.monotonic()`` reading.

    ``tools`` are function declarations ``{"name", "description"?, "parameters"?}`` (JSON
    Schema). ``generation_config`` takes ``temperature``, ``max_output_tokens``, ``top_p``,
    ``stop_sequences`` and ``seed`` (Anthropic has no seed; it is not sent there).
    ``cached_content`` (Gemini only) names a ``cachedContents/...`` resource that already holds
    the instructions, the tools and the earlier contents: they are then not sent, and
    ``contents`` should hold only what follows the cache.

    Raises ``ProviderError`` for every failure of the call or of the reply's shape, and
    ``ValueError`` for arguments no provider could accept.
    """
    if cached_content is not None:
        if connection.kind != "gemini":
            raise ValueError("cached_content is only supported by gemini connections")
        if not isinstance(cached_content, str) or not cached_content.strip():
            raise ValueError("cached_content must be a non-empty resource name")
    if instructions is not None and not isinstance(instructions, str):
        raise ValueError("instructions must be a string or None")
    call = _GenerateCall(
        model=_check_model(model),
        instructions=instructions or None,
        tools=_check_tools(tools),
        contents=_check_contents(contents),
        config=_check_config(generation_config),
        cached_content=cached_content,
    )
    build, parse = _WIRE_FORMATS[connection.kind]
    request = build(connection, call)
    fields: dict[str, Any] = {
        "connection": connection.name,
        "kind": connection.kind,
        "model": model,
        "operation": "generate",
        "content_count": len(call.contents),
        "tool_count": len(call.tools),
        "cached_content": cached_content is not None,
    }
    return logged_call(
        connection,
        request,
        deadline,
        fields,
        lambda envelope: parse(envelope, model),
        lambda generation: (
            _output_bytes(generation.parts),
            {
                "text_parts": sum(1 for part in generation.parts if "text" in part),
                "function_calls": sum(1 for part in generation.parts if "function_call" in part),
                "input_tokens": generation.input_tokens,
                "output_tokens": generation.output_tokens,
                "cached_tokens": generation.cached_tokens,
                "finish_reason": generation.finish_reason,
            },
        ),
        unserialisable="tools, contents and generation_config must be JSON-serialisable",
    )


# --------------------------------------------------------------------------- arguments


def _check_tools(tools: Any) -> list[dict]:
    if not isinstance(tools, list | tuple):
        raise ValueError("tools must be a list of function declarations")
    checked = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise ValueError(f"{where} must be an object")
        unknown = tool.keys() - _TOOL_KEYS
        if unknown:
            raise ValueError(f"{where} has unknown keys {sorted(unknown)}")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise ValueError(f"{where}.name must be a non-empty string")
        if "description" in tool and not isinstance(tool["description"], str):
            raise ValueError(f"{where}.description must be a string")
        if "parameters" in tool and not isinstance(tool["parameters"], dict):
            raise ValueError(f"{where}.parameters must be a JSON Schema object")
        checked.append(tool)
    return checked


def _check_contents(contents: Any) -> list[dict]:
    if not isinstance(contents, list | tuple) or not contents:
        raise ValueError("contents must be a non-empty list")
    for index, content in enumerate(contents):
        where = f"contents[{index}]"
        if not isinstance(content, dict) or content.get("role") not in {"user", "model"}:
            raise ValueError(f"{where} must be {{role: user|model, parts}}")
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            raise ValueError(f"{where}.parts must be a non-empty list")
        for number, part in enumerate(parts):
            _check_part(part, content["role"], f"{where}.parts[{number}]")
    return list(contents)


def _check_part(part: Any, role: str, where: str) -> None:
    kinds = ("text", "function_call", "function_response", "inline_data", "file_data")
    present = [kind for kind in kinds if isinstance(part, dict) and kind in part]
    if len(present) != 1 or len(part) != 1:
        raise ValueError(f"{where} must have exactly one of {', '.join(kinds)}")
    kind = present[0]
    value = part[kind]
    if kind == "text":
        if not isinstance(value, str):
            raise ValueError(f"{where}.text must be a string")
        return
    if not isinstance(value, dict):
        raise ValueError(f"{where}.{kind} must be an object")
    if kind in {"function_call", "function_response"}:
        expected_role = "model" if kind == "function_call" else "user"
        if role != expected_role:
            raise ValueError(f"{where}: a {kind} belongs in a {expected_role} content")
        payload = "args" if kind == "function_call" else "response"
        if not isinstance(value.get("id"), str) or not value["id"]:
            raise ValueError(f"{where}.{kind}.id must be a non-empty string")
        if not isinstance(value.get("name"), str) or not value["name"]:
            raise ValueError(f"{where}.{kind}.name must be a non-empty string")
        if not isinstance(value.get(payload, {}), dict):
            raise ValueError(f"{where}.{kind}.{payload} must be an object")


def _check_config(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ValueError("generation_config must be an object")
    unknown = config.keys() - GENERATION_CONFIG_KEYS
    if unknown:
        raise ValueError(
            f"generation_config has unknown keys {sorted(unknown)}; "
            f"allowed: {sorted(GENERATION_CONFIG_KEYS)}"
        )
    checked: dict[str, Any] = {}
    if config.get("temperature") is not None:
        checked["temperature"] = _check_temperature(config["temperature"])
    if config.get("max_output_tokens") is not None:
        checked["max_output_tokens"] = _check_max_tokens(config["max_output_tokens"])
    top_p = config.get("top_p")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, int | float):
            raise ValueError("top_p must be a number")
        if not math.isfinite(top_p) or not 0 <= top_p <= 1:
            raise ValueError("top_p must be a number from 0 to 1")
        checked["top_p"] = float(top_p)
    stops = config.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list | tuple) or not all(
            isinstance(stop, str) and stop for stop in stops
        ):
            raise ValueError("stop_sequences must be a list of non-empty strings")
        if stops:
            checked["stop_sequences"] = list(stops)
    seed = config.get("seed")
    if seed is not None:
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError("seed must be an integer")
        checked["seed"] = seed
    return checked


# --------------------------------------------------------------------------- reply helpers


def _output_bytes(parts: list[dict]) -> int:
    """What the reply holds, in bytes: its text and its calls' arguments."""
    total = 0
    for part in parts:
        if "text" in part:
            total += len(part["text"].encode("utf-8"))
        else:
            call = part["function_call"]
            total += len(call["name"].encode("utf-8"))
            total += len(json.dumps(call["args"], ensure_ascii=False).encode("utf-8"))
    return total


def _new_call_id() -> str:
    """An id for a call the provider sent without one; unique, so that the calls of
    different turns of a session never pair with each other's responses."""
    return f"call-{uuid.uuid4().hex}"


def _function_call(call_id: Any, name: Any, args: Any) -> dict:
    if not isinstance(name, str) or not name:
        raise _bad("function call without a name")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise _bad("function call arguments are not an object")
    return {
        "function_call": {
            "id": call_id if isinstance(call_id, str) and call_id else _new_call_id(),
            "name": name,
            "args": args,
        }
    }


def _text_part(text: Any) -> dict | None:
    return {"text": text} if isinstance(text, str) and text else None


def _generation(
    parts: list[dict],
    *,
    input_tokens: Any,
    output_tokens: Any,
    cached_tokens: Any,
    finish_reason: Any,
    model: str,
) -> Generation:
    reason = _enum_like(finish_reason)
    has_call = any("function_call" in part for part in parts)
    has_text = any("text" in part and part["text"].strip() for part in parts)
    if not has_call and not has_text:
        raise _bad("no text and no function call" + (f" finish_reason={reason}" if reason else ""))
    return Generation(
        parts=parts,
        input_tokens=_count(input_tokens),
        output_tokens=_count(output_tokens),
        cached_tokens=_count(cached_tokens),
        finish_reason=reason,
        model=model,
    )


def _json_text(value: Any) -> str:
    """A call's arguments or a function's response as the JSON string some formats want."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise ValueError("function arguments and responses must be JSON-serialisable") from None


# --------------------------------------------------------------------------- gemini


def _gemini_part(part: dict) -> dict:
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


def _gemini_request(connection: ProviderConnection, call: _GenerateCall) -> _Request:
    model_id = quote(call.model.removeprefix("models/"), safe="")
    url = endpoint(connection.base_url, "/v1beta", f"/models/{model_id}:generateContent")
    body: dict[str, Any] = {
        "contents": [
            {"role": content["role"], "parts": [_gemini_part(part) for part in content["parts"]]}
            for content in call.contents
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
    names = {
        "temperature": "temperature",
        "max_output_tokens": "maxOutputTokens",
        "top_p": "topP",
        "stop_sequences": "stopSequences",
        "seed": "seed",
    }
    generation = {names[key]: value for key, value in call.config.items()}
    if generation:
        body["generationConfig"] = generation
    headers = {"x-goog-api-key": connection.api_key} if connection.api_key else {}
    return _Request(url, headers, body)


def _gemini_parse(envelope: dict[str, Any], model: str) -> Generation:
    finish_reason, raw_parts = gemini_candidate_parts(envelope)
    parts: list[dict] = []
    for raw in raw_parts:
        # Thought summaries (``"thought": true``) are not the answer.
        if not isinstance(raw, dict) or raw.get("thought"):
            continue
        if isinstance(raw.get("functionCall"), dict):
            call = raw["functionCall"]
            parts.append(_function_call(call.get("id"), call.get("name"), call.get("args")))
        elif (text := _text_part(raw.get("text"))) is not None:
            parts.append(text)
    usage = envelope.get("usageMetadata")
    usage = usage if isinstance(usage, dict) else {}
    return _generation(
        parts,
        input_tokens=usage.get("promptTokenCount"),
        output_tokens=usage.get("candidatesTokenCount"),
        cached_tokens=usage.get("cachedContentTokenCount"),
        finish_reason=finish_reason,
        model=_reported_model(envelope.get("modelVersion"), model),
    )


# --------------------------------------------------------------------------- openai-compatible


def _openai_messages(call: _GenerateCall) -> list[dict]:
    messages: list[dict] = []
    if call.instructions:
        messages.append({"role": "system", "content": call.instructions})
    for content in call.contents:
        texts = [part["text"] for part in content["parts"] if "text" in part]
        if content["role"] == "model":
            tool_calls = [
                {
                    "id": part["function_call"]["id"],
                    "type": "function",
                    "function": {
                        "name": part["function_call"]["name"],
                        "arguments": _json_text(part["function_call"].get("args", {})),
                    },
                }
                for part in content["parts"]
                if "function_call" in part
            ]
            if not texts and not tool_calls:
                continue
            message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            messages.append(message)
            continue
        # Tool messages must follow the assistant's calls directly: they go before any text.
        for part in content["parts"]:
            if "function_response" in part:
                response = part["function_response"]
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": response["id"],
                        "content": _json_text(response.get("response", {})),
                    }
                )
        if texts:
            messages.append({"role": "user", "content": "\n\n".join(texts)})
    if not any(message["role"] != "system" for message in messages):
        raise ValueError("contents hold nothing this provider accepts (text or function parts)")
    return messages


def _openai_request(connection: ProviderConnection, call: _GenerateCall) -> _Request:
    url = endpoint(connection.base_url, "/v1", "/chat/completions")
    body: dict[str, Any] = {"model": call.model, "messages": _openai_messages(call)}
    if call.tools:
        functions = []
        for tool in call.tools:
            function = {"name": tool["name"]}
            if tool.get("description"):
                function["description"] = tool["description"]
            if "parameters" in tool:
                function["parameters"] = tool["parameters"]
            functions.append({"type": "function", "function": function})
        body["tools"] = functions
    names = {
        "temperature": "temperature",
        "max_output_tokens": "max_tokens",
        "top_p": "top_p",
        "stop_sequences": "stop",
        "seed": "seed",
    }
    body.update({names[key]: value for key, value in call.config.items()})
    headers = {"authorization": f"Bearer {connection.api_key}"} if connection.api_key else {}
    return _Request(url, headers, body)


def _openai_arguments(value: Any) -> Any:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise _bad("function call arguments are not a JSON string")
    if not value.strip():
        return {}
    try:
        return json.loads(value)
    except ValueError:
        raise _bad("function call arguments are not valid JSON") from None


def _openai_parse(envelope: dict[str, Any], model: str) -> Generation:
    choices = envelope.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad("no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _bad("choice without message")
    if message.get("refusal"):
        raise _bad("refusal")
    parts: list[dict] = []
    content = message.get("content")
    if isinstance(content, list):
        # A few compatible servers answer with content parts rather than a string.
        content = "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    if (text := _text_part(content)) is not None:
        parts.append(text)
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise _bad("tool_calls is not a list")
    for tool_call in tool_calls or []:
        function = tool_call.get("function") if isinstance(tool_call, dict) else None
        if not isinstance(function, dict):
            raise _bad("tool call without a function")
        parts.append(
            _function_call(
                tool_call.get("id"),
                function.get("name"),
                _openai_arguments(function.get("arguments")),
            )
        )
    usage = envelope.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    return _generation(
        parts,
        input_tokens=usage.get("prompt_tokens"),
        output_tokens=usage.get("completion_tokens"),
        cached_tokens=details.get("cached_tokens"),
        finish_reason=choice.get("finish_reason"),
        model=_reported_model(envelope.get("model"), model),
    )


# --------------------------------------------------------------------------- anthropic


def _anthropic_id(value: str) -> str:
    return _ANTHROPIC_ID_UNSAFE.sub("_", value)


def _anthropic_blocks(content: dict) -> list[dict]:
    blocks: list[dict] = []
    for part in content["parts"]:
        # Anthropic refuses empty text blocks.
        if part.get("text"):
            blocks.append({"type": "text", "text": part["text"]})
        elif "function_call" in part:
            call = part["function_call"]
            blocks.append(
                {
                    "type": "tool_use",
                    "id": _anthropic_id(call["id"]),
                    "name": call["name"],
                    "input": call.get("args", {}),
                }
            )
        elif "function_response" in part:
            response = part["function_response"]
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": _anthropic_id(response["id"]),
                    "content": _json_text(response.get("response", {})),
                }
            )
    return blocks


def _anthropic_messages(call: _GenerateCall) -> list[dict]:
    messages: list[dict] = []
    for content in call.contents:
        blocks = _anthropic_blocks(content)
        if not blocks:
            continue
        role = "assistant" if content["role"] == "model" else "user"
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


def _anthropic_request(connection: ProviderConnection, call: _GenerateCall) -> _Request:
    url = endpoint(connection.base_url, "/v1", "/messages")
    body: dict[str, Any] = {
        "model": call.model,
        "max_tokens": call.config.get("max_output_tokens") or ANTHROPIC_DEFAULT_MAX_TOKENS,
        "messages": _anthropic_messages(call),
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
    names = {"temperature": "temperature", "top_p": "top_p", "stop_sequences": "stop_sequences"}
    body.update({names[key]: value for key, value in call.config.items() if key in names})
    headers = {"anthropic-version": ANTHROPIC_VERSION}
    if connection.api_key:
        headers["x-api-key"] = connection.api_key
    return _Request(url, headers, body)


def _anthropic_parse(envelope: dict[str, Any], model: str) -> Generation:
    content = envelope.get("content")
    if not isinstance(content, list):
        raise _bad("no content")
    stop_reason = envelope.get("stop_reason")
    if stop_reason == "refusal":
        raise _bad("refusal")
    parts: list[dict] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            parts.append(_function_call(block.get("id"), block.get("name"), block.get("input")))
        elif block.get("type") == "text" and (text := _text_part(block.get("text"))) is not None:
            parts.append(text)
    usage = envelope.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return _generation(
        parts,
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        cached_tokens=usage.get("cache_read_input_tokens"),
        finish_reason=stop_reason,
        model=_reported_model(envelope.get("model"), model),
    )


_WIRE_FORMATS: dict[
    str,
    tuple[
        Callable[[ProviderConnection, _GenerateCall], _Request],
        Callable[[dict[str, Any], str], Generation],
    ],
] = {
    "gemini": (_gemini_request, _gemini_parse),
    "openai_compatible": (_openai_request, _openai_parse),
    "anthropic": (_anthropic_request, _anthropic_parse),
}
