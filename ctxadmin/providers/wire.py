"""What every wire format shares: the checked calls it builds a request from, the argument
checks, and the reply helpers that turn a provider's envelope into a ``Completion`` or a
``Generation`` (or a ``provider_bad_response``) the same way for every kind."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxadmin.providers.base import Generation, ProviderError

_ENUM_LIKE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


@dataclass(frozen=True)
class JsonCall:
    """What a wire format needs to build a ``complete_json`` request; the same for every kind."""

    model: str
    system: str
    prompt: str
    schema: Mapping[str, Any] | None
    max_output_tokens: int | None
    temperature: float


@dataclass(frozen=True)
class GenerateCall:
    """What a wire format needs to build a ``generate`` request; checked, the same for every
    kind."""

    model: str
    instructions: str | None
    tools: list[dict]
    contents: list[dict]
    config: dict[str, Any]
    cached_content: str | None


def from_user_turn(contents: list[dict]) -> list[dict]:
    """``contents`` without the leading turns that hold a function call or response: a
    history cut by a budget may begin with a call whose user turn was cut, or a response
    whose call was, which Gemini (a call turn follows a user or response turn), Anthropic
    and OpenAI (a result answers the calls just before it) refuse. A leading model text
    (a compaction summary) is kept."""
    for index, content in enumerate(contents):
        if not any(
            "function_call" in part or "function_response" in part
            for part in content.get("parts", [])
        ):
            return contents[index:]
    return contents


# --------------------------------------------------------------------------- arguments


def check_model(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ValueError("model must be a non-empty string")
    return model


def check_max_tokens(value: int | None) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("max_output_tokens must be a positive integer")
    return value


def check_temperature(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("temperature must be a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError("temperature must be a finite number >= 0")
    return float(value)


# --------------------------------------------------------------------------- reply helpers


def bad(detail: str) -> ProviderError:
    return ProviderError("provider_bad_response", status=200, detail=detail)


def count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def enum_like(value: Any) -> str | None:
    """A provider's enum value (finish reason, block reason), or None for anything free-form."""
    if isinstance(value, str) and _ENUM_LIKE.fullmatch(value):
        return value
    return None


def reported_model(value: Any, requested: str) -> str:
    return value if isinstance(value, str) and value else requested


def nonempty(text: str, finish_reason: Any) -> str:
    if not text.strip():
        reason = enum_like(finish_reason)
        raise bad("empty text" + (f" finish_reason={reason}" if reason else ""))
    return text


def new_call_id() -> str:
    """An id for a call the provider sent without one; unique, so that the calls of
    different turns of a session never pair with each other's responses."""
    return f"call-{uuid.uuid4().hex}"


def function_call(call_id: Any, name: Any, args: Any) -> dict:
    if not isinstance(name, str) or not name:
        raise bad("function call without a name")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise bad("function call arguments are not an object")
    return {
        "function_call": {
            "id": call_id if isinstance(call_id, str) and call_id else new_call_id(),
            "name": name,
            "args": args,
        }
    }


def text_part(text: Any) -> dict | None:
    return {"text": text} if isinstance(text, str) and text else None


def generation(
    parts: list[dict],
    *,
    input_tokens: Any,
    output_tokens: Any,
    cached_tokens: Any,
    finish_reason: Any,
    model: str,
) -> Generation:
    reason = enum_like(finish_reason)
    has_call = any("function_call" in part for part in parts)
    has_text = any("text" in part and part["text"].strip() for part in parts)
    if not has_call and not has_text:
        raise bad("no text and no function call" + (f" finish_reason={reason}" if reason else ""))
    return Generation(
        parts=parts,
        input_tokens=count(input_tokens),
        output_tokens=count(output_tokens),
        cached_tokens=count(cached_tokens),
        finish_reason=reason,
        model=model,
    )


def json_text(value: Any) -> str:
    """A call's arguments or a function's response as the JSON string some formats want."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise ValueError("function arguments and responses must be JSON-serialisable") from None
