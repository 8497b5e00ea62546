"""``generate``'s requests, per kind, against local servers that check them the way the real
APIs do (no database): ctxadmin's contents, instructions and tool declarations in each
provider's request format, cached content, media parts and a full round trip."""

from __future__ import annotations

import json

import pytest

from ctxadmin.providers import KINDS
from ctxadmin.testing.fake_providers import FakeProvider
from tests.generate_helpers import (
    ARG_VALUE,
    CALL,
    INSTRUCTIONS,
    KEY,
    PARAMETERS,
    PROMPT,
    REPLY,
    RESPONSE,
    RESULT_VALUE,
    ROUND_TRIP,
    run,
)


@pytest.fixture(params=sorted(KINDS))
def fake(request):
    with FakeProvider(request.param, api_key=KEY) as server:
        yield server


# --------------------------------------------------------------------------- requests, per kind


def test_gemini_request():
    with FakeProvider("gemini", api_key=KEY) as fake:
        run(
            fake.connection(),
            contents=ROUND_TRIP,
            generation_config={
                "temperature": 0.3,
                "max_output_tokens": 512,
                "top_p": 0.9,
                "stop_sequences": ["END"],
                "seed": 7,
            },
        )
        assert fake.problems == []
        request = fake.requests[-1]
    assert request.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert request.headers["x-goog-api-key"] == KEY
    body = request.json
    assert body["systemInstruction"] == {"parts": [{"text": INSTRUCTIONS}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": PROMPT}]},
        {
            "role": "model",
            "parts": [
                {"text": "Let me look."},
                {
                    "functionCall": {
                        "id": "call_1",
                        "name": "lookup_order",
                        "args": {"order_id": ARG_VALUE},
                    }
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "call_1",
                        "name": "lookup_order",
                        "response": {"status": RESULT_VALUE},
                    }
                }
            ],
        },
    ]
    # JSON Schema goes to parametersJsonSchema: ``parameters`` refuses additionalProperties.
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "lookup_order",
                    "description": "Find an order by id",
                    "parametersJsonSchema": PARAMETERS,
                },
                {"name": "list_orders"},
            ]
        }
    ]
    assert body["generationConfig"] == {
        "temperature": 0.3,
        "maxOutputTokens": 512,
        "topP": 0.9,
        "stopSequences": ["END"],
        "seed": 7,
    }
    assert "cachedContent" not in body and "toolConfig" not in body


def test_gemini_without_instructions_tools_or_config_sends_none_of_them():
    with FakeProvider("gemini", api_key=KEY) as fake:
        run(fake.connection(), instructions=None, tools=[])
        assert fake.problems == []
        body = fake.requests[-1].json
    assert body.keys() == {"contents"}


def test_gemini_cached_content_replaces_instructions_and_tools():
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.success(REPLY, input_tokens=5000, cached_tokens=4800))
        # The cache ends with the model's call: the new contents start with its response.
        contents = [{"role": "user", "parts": [{"function_response": RESPONSE}]}]
        generation = run(
            fake.connection(), contents=contents, cached_content="cachedContents/abc123"
        )
        assert fake.problems == []
        body = fake.requests[-1].json
    assert body["cachedContent"] == "cachedContents/abc123"
    assert not {"systemInstruction", "tools", "toolConfig"} & body.keys()
    assert body["contents"][0]["parts"][0]["functionResponse"]["name"] == "lookup_order"
    assert (generation.input_tokens, generation.cached_tokens) == (5000, 4800)


def test_gemini_inline_and_file_data_are_passed_on():
    contents = [
        {
            "role": "user",
            "parts": [
                {"text": PROMPT},
                {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
                {"file_data": {"mime_type": "application/pdf", "file_uri": "gs://b/o.pdf"}},
            ],
        }
    ]
    with FakeProvider("gemini", api_key=KEY) as fake:
        run(fake.connection(), contents=contents)
        assert fake.problems == []
        parts = fake.requests[-1].json["contents"][0]["parts"]
    assert parts[1:] == [
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
        {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/o.pdf"}},
    ]


def test_openai_request():
    with FakeProvider("openai_compatible", api_key=KEY) as fake:
        run(
            fake.connection(),
            contents=[*ROUND_TRIP, {"role": "user", "parts": [{"text": "thanks"}]}],
            generation_config={
                "temperature": 0.3,
                "max_output_tokens": 512,
                "top_p": 0.9,
                "stop_sequences": ["END"],
                "seed": 7,
            },
        )
        assert fake.problems == []
        request = fake.requests[-1]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = request.json
    assert body["messages"] == [
        {"role": "system", "content": INSTRUCTIONS},
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "lookup_order",
                        "arguments": json.dumps({"order_id": ARG_VALUE}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": json.dumps({"status": RESULT_VALUE}),
        },
        {"role": "user", "content": "thanks"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Find an order by id",
                "parameters": PARAMETERS,
            },
        },
        {"type": "function", "function": {"name": "list_orders"}},
    ]
    assert {k: body[k] for k in ("temperature", "max_tokens", "top_p", "stop", "seed")} == {
        "temperature": 0.3,
        "max_tokens": 512,
        "top_p": 0.9,
        "stop": ["END"],
        "seed": 7,
    }
    assert "response_format" not in body


def test_openai_call_without_text_has_null_content_and_parallel_results_follow():
    contents = [
        {"role": "user", "parts": [{"text": PROMPT}]},
        {
            "role": "model",
            "parts": [
                {"function_call": CALL},
                {"function_call": {"id": "call_2", "name": "list_orders", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"text": "and hurry"},
                {"function_response": RESPONSE},
                {"function_response": {"id": "call_2", "name": "list_orders", "response": {}}},
            ],
        },
    ]
    with FakeProvider("openai_compatible", api_key=KEY) as fake:
        run(fake.connection(), contents=contents, instructions=None)
        assert fake.problems == []
        messages = fake.requests[-1].json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert messages[1]["content"] is None
    assert [m["tool_call_id"] for m in messages[2:4]] == ["call_1", "call_2"]


def test_anthropic_request():
    with FakeProvider("anthropic", api_key=KEY) as fake:
        run(
            fake.connection(),
            contents=[*ROUND_TRIP, {"role": "user", "parts": [{"text": "thanks"}]}],
            generation_config={"temperature": 0.3, "top_p": 0.9, "stop_sequences": ["END"]},
        )
        assert fake.problems == []
        request = fake.requests[-1]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    body = request.json
    assert body["system"] == INSTRUCTIONS
    assert body["max_tokens"] == 4096
    # The function response and the next text are one user turn, the result first.
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "lookup_order",
                    "input": {"order_id": ARG_VALUE},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": json.dumps({"status": RESULT_VALUE}),
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    assert body["tools"] == [
        {"name": "lookup_order", "description": "Find an order by id", "input_schema": PARAMETERS},
        {"name": "list_orders", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert (body["temperature"], body["top_p"], body["stop_sequences"]) == (0.3, 0.9, ["END"])


def test_anthropic_tool_results_come_before_text_in_their_turn():
    contents = [
        *ROUND_TRIP[:2],
        {"role": "user", "parts": [{"text": "and hurry"}, {"function_response": RESPONSE}]},
    ]
    with FakeProvider("anthropic", api_key=KEY) as fake:
        run(fake.connection(), contents=contents)
        assert fake.problems == []
        last = fake.requests[-1].json["messages"][-1]
    assert [block["type"] for block in last["content"]] == ["tool_result", "text"]


def test_anthropic_max_tokens_from_config_and_no_seed():
    with FakeProvider("anthropic", api_key=KEY) as fake:
        run(fake.connection(), generation_config={"max_output_tokens": 300, "seed": 3})
        assert fake.problems == []
        body = fake.requests[-1].json
    assert body["max_tokens"] == 300
    assert "seed" not in body


def test_anthropic_ids_are_made_safe_on_both_sides():
    contents = [
        {"role": "user", "parts": [{"text": PROMPT}]},
        {"role": "model", "parts": [{"function_call": {**CALL, "id": "adk.7:x@y"}}]},
        {"role": "user", "parts": [{"function_response": {**RESPONSE, "id": "adk.7:x@y"}}]},
    ]
    with FakeProvider("anthropic", api_key=KEY) as fake:
        run(fake.connection(), contents=contents)
        assert fake.problems == []
        messages = fake.requests[-1].json["messages"]
    assert messages[1]["content"][0]["id"] == messages[2]["content"][0]["tool_use_id"]


@pytest.mark.parametrize("kind", ["openai_compatible", "anthropic"])
def test_media_parts_are_skipped_where_not_supported(kind):
    contents = [
        {
            "role": "user",
            "parts": [
                {"text": PROMPT},
                {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
        {
            "role": "model",
            "parts": [{"file_data": {"mime_type": "application/pdf", "file_uri": "gs://b/o"}}],
        },
        {"role": "user", "parts": [{"text": "more"}]},
    ]
    with FakeProvider(kind, api_key=KEY) as fake:
        run(fake.connection(), contents=contents, instructions=None)
        assert fake.problems == []
        body = fake.requests[-1].json
    dumped = json.dumps(body)
    assert "iVBORw0KGgo" not in dumped and "gs://b/o" not in dumped
    # The model turn held nothing that could be sent; the two user turns remain.
    if kind == "anthropic":
        assert body["messages"] == [
            {
                "role": "user",
                "content": [{"type": "text", "text": PROMPT}, {"type": "text", "text": "more"}],
            }
        ]
    else:
        assert body["messages"] == [
            {"role": "user", "content": PROMPT},
            {"role": "user", "content": "more"},
        ]


def test_round_trip_is_accepted(fake):
    fake.script(fake.function_call("lookup_order", {"order_id": ARG_VALUE}))
    first = run(fake.connection())
    [call_part] = first.parts
    fake.script(fake.success(REPLY))
    contents = [
        {"role": "user", "parts": [{"text": PROMPT}]},
        {"role": "model", "parts": first.parts},
        {
            "role": "user",
            "parts": [
                {
                    "function_response": {
                        "id": call_part["function_call"]["id"],
                        "name": "lookup_order",
                        "response": {"status": RESULT_VALUE},
                    }
                }
            ],
        },
    ]
    second = run(fake.connection(), contents=contents)
    assert fake.problems == []
    assert second.parts == [{"text": REPLY}]
    assert len(fake.requests) == 2


def _first_turn(kind: str, body: dict):
    """The first conversational turn of a request in the provider's wire format."""
    if kind == "gemini":
        return body["contents"][0]
    messages = [m for m in body["messages"] if m["role"] != "system"]
    return messages[0]


def test_a_history_cut_before_its_user_turn_starts_where_the_provider_accepts(fake):
    """A budget cut can leave a history that opens with the model's call and its orphaned
    response: each provider refuses that order (Gemini: a call turn follows a user or
    response turn; Anthropic: the first message is the user's; OpenAI: a tool message
    answers the calls just before it), so those turns are left out; the model's text after
    them (a compaction summary, say) is kept, as the user's opening for Anthropic."""
    contents = [
        {"role": "model", "parts": [{"function_call": CALL}]},
        {"role": "user", "parts": [{"function_response": RESPONSE}]},
        {"role": "model", "parts": [{"text": "It shipped."}]},
        {"role": "user", "parts": [{"text": PROMPT}]},
    ]
    fake.script(fake.success(REPLY))
    run(fake.connection(), contents=contents)
    assert fake.problems == []
    body = fake.requests[-1].json
    first = _first_turn(fake.kind, body)
    assert "It shipped." in json.dumps(first)
    assert first["role"] == (
        "model" if fake.kind == "gemini" else "user" if fake.kind == "anthropic" else "assistant"
    )
    assert PROMPT in json.dumps(body)
    assert RESULT_VALUE not in json.dumps(body) and ARG_VALUE not in json.dumps(body)
