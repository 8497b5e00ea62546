"""One model call with tools (function calling), over the same three wire formats as
``complete_json``: Gemini ``generateContent``, OpenAI-compatible ``chat/completions`` and
Anthropic ``messages`` (built and read in ``gemini``, ``openai_compat`` and ``anthropic``;
this module checks the arguments and picks the format).

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
import math
from collections.abc import Callable
from typing import Any

import ctxadmin.providers.anthropic as anthropic
import ctxadmin.providers.gemini as gemini
import ctxadmin.providers.openai_compat as openai_compat
from ctxadmin.providers.base import Generation, ProviderConnection
from ctxadmin.providers.transport import Request, logged_call
from ctxadmin.providers.wire import (
    GenerateCall,
    check_max_tokens,
    check_model,
    check_temperature,
)

__all__ = ["GENERATION_CONFIG_KEYS", "Generation", "generate"]

GENERATION_CONFIG_KEYS: frozenset[str] = frozenset(
    {"temperature", "max_output_tokens", "top_p", "stop_sequences", "seed"}
)
_TOOL_KEYS = frozenset({"name", "description", "parameters"})


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
    call = GenerateCall(
        model=check_model(model),
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


PART_KINDS = ("text", "function_call", "function_response", "inline_data", "file_data")
# What a part may carry beside its one kind: a Gemini thought and its signature.
THOUGHT_KEYS = ("thought", "thought_signature")


def sendable(content: dict | None) -> dict | None:
    """A stored event's content as a provider turn: its data parts (with their thought
    fields), role ``user`` where the event named none; None when no part has data. ADK's
    other part fields (executable code, transcriptions, ...) stay in the stored event."""
    parts = []
    for part in (content or {}).get("parts") or []:
        kind = next((kind for kind in PART_KINDS if part.get(kind) is not None), None)
        if kind is not None:
            kept = {key: part[key] for key in THOUGHT_KEYS if part.get(key) is not None}
            parts.append({kind: part[kind], **kept})
    if not parts:
        return None
    return {"role": content.get("role") or "user", "parts": parts}


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
    kinds = PART_KINDS
    present = [kind for kind in kinds if isinstance(part, dict) and kind in part]
    if len(present) != 1 or set(part) - {*present, *THOUGHT_KEYS}:
        raise ValueError(f"{where} must have exactly one of {', '.join(kinds)}")
    if "thought" in part and not isinstance(part["thought"], bool):
        raise ValueError(f"{where}.thought must be true or false")
    if "thought_signature" in part and not isinstance(part["thought_signature"], str):
        raise ValueError(f"{where}.thought_signature must be a base64 string")
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
        checked["temperature"] = check_temperature(config["temperature"])
    if config.get("max_output_tokens") is not None:
        checked["max_output_tokens"] = check_max_tokens(config["max_output_tokens"])
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


_WIRE_FORMATS: dict[
    str,
    tuple[
        Callable[[ProviderConnection, GenerateCall], Request],
        Callable[[dict[str, Any], str], Generation],
    ],
] = {
    "gemini": (gemini.generate_request, gemini.generate_parse),
    "openai_compatible": (openai_compat.generate_request, openai_compat.generate_parse),
    "anthropic": (anthropic.generate_request, anthropic.generate_parse),
}
