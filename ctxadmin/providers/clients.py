"""One call to a model provider that asks for JSON output, over plain HTTP.

``complete_json`` speaks three wire formats (Gemini ``generateContent``, OpenAI-compatible
``chat/completions``, Anthropic ``messages``; see ``gemini``, ``openai_compat`` and
``anthropic``), bounds the call by an absolute deadline and the reply by a byte limit (see
``transport``), and turns every failure into a ``ProviderError`` with a stable code. It never
retries: whether a rate limit or an outage is worth another attempt is the caller's
decision, made against its own budget.

The ``ctxadmin.providers`` logger records one line per call with names, sizes, token counts
and durations only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import ctxadmin.providers.anthropic as anthropic
import ctxadmin.providers.gemini as gemini
import ctxadmin.providers.openai_compat as openai_compat
from ctxadmin.providers.anthropic import json_instruction, strip_json_fence
from ctxadmin.providers.base import Completion, ProviderConnection
from ctxadmin.providers.transport import Request, logged_call
from ctxadmin.providers.wire import (
    JsonCall,
    check_max_tokens,
    check_model,
    check_temperature,
    enum_like,
)

__all__ = ["complete_json", "json_instruction", "parse_json_reply", "strip_json_fence"]

_WIRE_FORMATS: dict[
    str,
    tuple[
        Callable[[ProviderConnection, JsonCall], Request],
        Callable[[dict[str, Any], str], Completion],
    ],
] = {
    "gemini": (gemini.json_request, gemini.json_parse),
    "openai_compatible": (openai_compat.json_request, openai_compat.json_parse),
    "anthropic": (anthropic.json_request, anthropic.json_parse),
}


def parse_json_reply(text: str) -> Any:
    """A reply's JSON value, or ``text`` itself when it is not JSON (even once a surrounding
    code fence is removed): the caller's check then names what is wrong with it."""
    for candidate in (text, strip_json_fence(text)):
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return text


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
    call = JsonCall(
        model=check_model(model),
        system=system,
        prompt=prompt,
        schema=schema,
        max_output_tokens=check_max_tokens(max_output_tokens),
        temperature=check_temperature(temperature),
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
                "finish_reason": enum_like(completion.finish_reason),
            },
        ),
    )
