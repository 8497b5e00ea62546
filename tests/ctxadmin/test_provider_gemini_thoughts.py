"""Gemini's thought signatures survive a turn: read from a reply, sent back on the part that
carried them (Gemini refuses a function-calling turn without them)."""

from __future__ import annotations

import json

import pytest

from ctxadmin.providers.generate import sendable
from ctxadmin.testing.fake_providers import FakeProvider
from tests.generate_helpers import CALL, KEY, PROMPT, RESPONSE, run


def test_a_reply_keeps_its_thought_signature():
    envelope = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {"id": "g-1", "name": "list_orders", "args": {}},
                            "thoughtSignature": "c2lnLTE=",
                        },
                    ],
                },
                "finishReason": "STOP",
            }
        ],
    }
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.raw(json.dumps(envelope).encode()))
        generation = run(fake.connection())
    assert generation.parts == [
        {
            "function_call": {"id": "g-1", "name": "list_orders", "args": {}},
            "thought_signature": "c2lnLTE=",
        }
    ]


def test_thought_and_signature_go_out_in_gemini_names():
    stored_turns = [
        {"role": "user", "parts": [{"text": PROMPT}]},
        {
            "role": "model",
            "parts": [
                {"text": "weighing it", "thought": True, "thought_signature": "c2lnLTA="},
                {"function_call": CALL, "thought_signature": "c2lnLTE="},
                {"executable_code": {"code": "print(1)"}},  # kept in the event, not sent
            ],
        },
        {"parts": [{"function_response": RESPONSE}]},  # no role: a user turn
    ]
    contents = [sendable(content) for content in stored_turns]
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.success("done"))
        run(fake.connection(), contents=contents)
        body = json.loads(fake.requests[-1].body)
    assert fake.problems == []
    model_parts = body["contents"][1]["parts"]
    assert model_parts[0] == {
        "text": "weighing it",
        "thought": True,
        "thoughtSignature": "c2lnLTA=",
    }
    assert model_parts[1]["thoughtSignature"] == "c2lnLTE="
    assert model_parts[1]["functionCall"]["id"] == CALL["id"]
    assert len(model_parts) == 2
    assert body["contents"][2]["role"] == "user"


@pytest.mark.parametrize("kind", ["openai_compatible", "anthropic"])
def test_a_thought_is_not_sent_as_said_text_to_other_providers(kind):
    thinking = "THOUGHT-77ab: weighing the order"
    stored_turns = [
        {"role": "user", "parts": [{"text": PROMPT}]},
        {
            "role": "model",
            "parts": [
                {"text": thinking, "thought": True, "thought_signature": "c2lnLTA="},
                {"text": "Looking it up."},
                {"function_call": CALL},
            ],
        },
        {"role": "user", "parts": [{"function_response": RESPONSE}]},
    ]
    contents = [sendable(content) for content in stored_turns]
    with FakeProvider(kind, api_key=KEY) as fake:
        fake.script(fake.success("done"))
        run(fake.connection(), contents=contents)
        body = fake.requests[-1].body.decode()
    assert fake.problems == []
    assert "Looking it up." in body
    assert "THOUGHT-77ab" not in body
