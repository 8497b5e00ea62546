"""What the ``generate`` tests share: texts that must never leak, the tools and contents of a
round trip, and one call (or one failing call) against a connection."""

from __future__ import annotations

import time

import pytest

from ctxadmin.providers import ProviderConnection, ProviderError
from ctxadmin.providers.generate import Generation, generate

KEY = "sk-KEY-81aa-do-not-log"
PROMPT = "PROMPT-3d9e: where is my order?"
INSTRUCTIONS = "INSTRUCTIONS-6b20: you are the order desk"
ARG_VALUE = "ORDER-ARG-55c7"
RESULT_VALUE = "RESULT-9f13 shipped on Monday"
REPLY = "REPLY-e402: your order shipped on Monday"
SECRETS = (KEY, PROMPT, INSTRUCTIONS, ARG_VALUE, RESULT_VALUE, REPLY, "3d9e", "e402")
MODELS = {
    "gemini": "gemini-2.5-flash",
    "openai_compatible": "gpt-4.1-mini",
    "anthropic": "claude-sonnet-4-5",
}
FINISH = {"gemini": "STOP", "openai_compatible": "stop", "anthropic": "end_turn"}
CALL_FINISH = {"gemini": "STOP", "openai_compatible": "tool_calls", "anthropic": "tool_use"}
PARAMETERS = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
TOOLS = [
    {"name": "lookup_order", "description": "Find an order by id", "parameters": PARAMETERS},
    {"name": "list_orders"},
]
CALL = {"id": "call_1", "name": "lookup_order", "args": {"order_id": ARG_VALUE}}
RESPONSE = {"id": "call_1", "name": "lookup_order", "response": {"status": RESULT_VALUE}}
ROUND_TRIP = [
    {"role": "user", "parts": [{"text": PROMPT}]},
    {"role": "model", "parts": [{"text": "Let me look."}, {"function_call": CALL}]},
    {"role": "user", "parts": [{"function_response": RESPONSE}]},
]


def run(connection: ProviderConnection, *, timeout_s: float = 5.0, **overrides) -> Generation:
    arguments = {
        "model": MODELS[connection.kind],
        "instructions": INSTRUCTIONS,
        "tools": TOOLS,
        "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
        "deadline": time.monotonic() + timeout_s,
        **overrides,
    }
    return generate(connection, **arguments)


def failure(connection: ProviderConnection, **overrides) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        run(connection, **overrides)
    error = caught.value
    for text in (str(error), repr(error)):
        for secret in (*SECRETS, connection.base_url):
            assert secret not in text
    assert error.__cause__ is None
    return error
