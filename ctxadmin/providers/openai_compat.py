"""The OpenAI-compatible wire format (OpenAI, Ollama, vLLM, text-embeddings-inference):
``chat/completions`` for JSON replies (``complete_json``) and for turns with tools
(``generate``), and ``embeddings``.

Requests are built as ``transport.Request``; replies are read with ``wire``'s helpers, so a
malformed one is a ``provider_bad_response`` like every other kind's.
"""

from __future__ import annotations

import json
from typing import Any

from ctxadmin.providers.base import Completion, Generation, ProviderConnection, embedding_bad
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
SCHEMA_NAME = "summary"

_GENERATION_CONFIG_NAMES = {
    "temperature": "temperature",
    "max_output_tokens": "max_tokens",
    "top_p": "top_p",
    "stop_sequences": "stop",
    "seed": "seed",
}


def headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def _message(envelope: dict[str, Any]) -> tuple[dict, dict]:
    """(the first choice, its message); a refusal or a missing one is a bad response."""
    choices = envelope.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise bad("choice without message")
    if message.get("refusal"):
        raise bad("refusal")
    return choice, message


def _content_text(content: Any) -> Any:
    if isinstance(content, list):
        # A few compatible servers answer with content parts rather than a string.
        content = "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return content


# --------------------------------------------------------------------------- JSON replies


def json_request(connection: ProviderConnection, call: JsonCall) -> Request:
    url = endpoint(connection.base_url, API_VERSION, "/chat/completions")
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
            "json_schema": {"name": SCHEMA_NAME, "schema": call.schema, "strict": False},
        }
    else:
        body["response_format"] = {"type": "json_object"}
    return Request(url, headers(connection.api_key), body)


def json_parse(envelope: dict[str, Any], model: str) -> Completion:
    choice, message = _message(envelope)
    finish_reason = choice.get("finish_reason")
    content = _content_text(message.get("content"))
    if not isinstance(content, str):
        raise bad("message without text content")
    usage = envelope.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(
        text=nonempty(content, finish_reason),
        input_tokens=count(usage.get("prompt_tokens")),
        output_tokens=count(usage.get("completion_tokens")),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=reported_model(envelope.get("model"), model),
    )


# --------------------------------------------------------------------------- turns with tools


def _messages(call: GenerateCall) -> list[dict]:
    messages: list[dict] = []
    if call.instructions:
        messages.append({"role": "system", "content": call.instructions})
    # Tool messages must answer the assistant's calls just before them.
    for content in from_user_turn(call.contents):
        # A thought (Gemini's reasoning, kept for Gemini) is not part of what was said.
        texts = [
            part["text"] for part in content["parts"] if "text" in part and not part.get("thought")
        ]
        if content["role"] == "model":
            tool_calls = [
                {
                    "id": part["function_call"]["id"],
                    "type": "function",
                    "function": {
                        "name": part["function_call"]["name"],
                        "arguments": json_text(part["function_call"].get("args", {})),
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
                        "content": json_text(response.get("response", {})),
                    }
                )
        if texts:
            messages.append({"role": "user", "content": "\n\n".join(texts)})
    if not any(message["role"] != "system" for message in messages):
        raise ValueError("contents hold nothing this provider accepts (text or function parts)")
    return messages


def generate_request(connection: ProviderConnection, call: GenerateCall) -> Request:
    url = endpoint(connection.base_url, API_VERSION, "/chat/completions")
    body: dict[str, Any] = {"model": call.model, "messages": _messages(call)}
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
    body.update({_GENERATION_CONFIG_NAMES[key]: value for key, value in call.config.items()})
    return Request(url, headers(connection.api_key), body)


def _arguments(value: Any) -> Any:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise bad("function call arguments are not a JSON string")
    if not value.strip():
        return {}
    try:
        return json.loads(value)
    except ValueError:
        raise bad("function call arguments are not valid JSON") from None


def generate_parse(envelope: dict[str, Any], model: str) -> Generation:
    choice, message = _message(envelope)
    parts: list[dict] = []
    if (text := text_part(_content_text(message.get("content")))) is not None:
        parts.append(text)
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise bad("tool_calls is not a list")
    for tool_call in tool_calls or []:
        function = tool_call.get("function") if isinstance(tool_call, dict) else None
        if not isinstance(function, dict):
            raise bad("tool call without a function")
        parts.append(
            function_call(
                tool_call.get("id"),
                function.get("name"),
                _arguments(function.get("arguments")),
            )
        )
    usage = envelope.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    return generation(
        parts,
        input_tokens=usage.get("prompt_tokens"),
        output_tokens=usage.get("completion_tokens"),
        cached_tokens=details.get("cached_tokens"),
        finish_reason=choice.get("finish_reason"),
        model=reported_model(envelope.get("model"), model),
    )


# --------------------------------------------------------------------------- embeddings


def embed_request(
    connection: ProviderConnection,
    model: str,
    texts: list[str],
    *,
    dimensions: int | None = None,
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(url, headers, body) of ``POST /v1/embeddings``; ``dimensions`` is sent when given
    (OpenAI's text-embedding-3 models shorten their vectors to it)."""
    url = endpoint(connection.base_url, API_VERSION, "/embeddings")
    body: dict[str, Any] = {"model": model, "input": texts, "encoding_format": "float"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    return url, headers(connection.api_key), body


def embed_parse(envelope: dict[str, Any], count_: int, status: int) -> list[Any]:
    """The vectors of an embeddings reply, in input order (not yet checked)."""
    data = envelope.get("data")
    if not isinstance(data, list):
        raise embedding_bad("no data", status)
    if len(data) != count_:
        raise embedding_bad(f"vectors={len(data)} inputs={count_}", status)
    if not all(isinstance(item, dict) and "embedding" in item for item in data):
        raise embedding_bad("data item without embedding", status)
    indices = [item.get("index") for item in data]
    if all(index is None for index in indices):
        return [item["embedding"] for item in data]  # a server that leaves out ``index``
    if sorted(i if count(i) is not None else -1 for i in indices) != list(range(count_)):
        raise embedding_bad("data indices are not 0..n-1", status)
    ordered: list[Any] = [None] * count_
    for item in data:
        ordered[item["index"]] = item["embedding"]
    return ordered


def embed_tokens(envelope: dict[str, Any]) -> int | None:
    """The input tokens an embeddings reply reports, if any."""
    usage = envelope.get("usage")
    if not isinstance(usage, dict):
        return None
    return count(usage.get("prompt_tokens", usage.get("total_tokens")))
