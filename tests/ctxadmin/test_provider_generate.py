"""``generate`` (one model call with tools) against local servers that speak each provider's
wire format and check requests the way the real APIs do (no database).

Each kind is pinned in both directions: ctxadmin's contents, instructions and tool
declarations in the provider's request format, and the provider's reply (text, function
calls, usage) back in ctxadmin's event format. Errors and log records are checked for leaks.
"""

from __future__ import annotations

import json
import logging
import time

import pytest

from ctxadmin.providers import KINDS, ProviderConnection, ProviderError
from ctxadmin.providers.generate import Generation, generate
from ctxadmin.testing.fake_providers import FakeProvider, check_request

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


@pytest.fixture(params=sorted(KINDS))
def fake(request):
    with FakeProvider(request.param, api_key=KEY) as server:
        yield server


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


# --------------------------------------------------------------------------- replies


def test_text_reply(fake):
    fake.script(fake.success(REPLY, input_tokens=40, output_tokens=9))
    generation = run(fake.connection())
    assert fake.problems == []
    assert generation == Generation(
        parts=[{"text": REPLY}],
        input_tokens=40,
        output_tokens=9,
        cached_tokens=None,
        finish_reason=FINISH[fake.kind],
        model=MODELS[fake.kind],
    )


def test_function_call_reply(fake):
    fake.script(fake.function_call("lookup_order", {"order_id": ARG_VALUE}, call_id="call_7"))
    generation = run(fake.connection())
    assert fake.problems == []
    assert generation.parts == [
        {"function_call": {"id": "call_7", "name": "lookup_order", "args": {"order_id": ARG_VALUE}}}
    ]
    assert generation.finish_reason == CALL_FINISH[fake.kind]


def test_text_and_parallel_calls_keep_their_order(fake):
    fake.script(
        fake.function_calls(
            [("lookup_order", {"order_id": "a"}, None), ("list_orders", {}, None)],
            text="Checking both.",
        )
    )
    parts = run(fake.connection()).parts
    assert parts[0] == {"text": "Checking both."}
    calls = [part["function_call"] for part in parts[1:]]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("lookup_order", {"order_id": "a"}),
        ("list_orders", {}),
    ]
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == 2 and all(isinstance(i, str) and i for i in ids)


def test_gemini_calls_without_ids_get_unique_ones():
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(
            fake.function_call("list_orders", {}),
            fake.function_call("list_orders", {}),
        )
        first = run(fake.connection()).parts[0]["function_call"]
        second = run(fake.connection()).parts[0]["function_call"]
    assert first["id"].startswith("call-") and second["id"].startswith("call-")
    assert first["id"] != second["id"]


def test_gemini_call_ids_from_the_model_are_kept_and_thoughts_skipped():
    envelope = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "thinking about it", "thought": True},
                        {"functionCall": {"id": "g-1", "name": "list_orders", "args": {}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2},
    }
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.raw(json.dumps(envelope).encode()))
        generation = run(fake.connection())
    assert generation.parts == [{"function_call": {"id": "g-1", "name": "list_orders", "args": {}}}]
    assert generation.model == MODELS["gemini"]


@pytest.mark.parametrize("cached", [0, 1500])
def test_usage_and_cached_tokens(fake, cached):
    fake.script(fake.success(REPLY, input_tokens=2000, output_tokens=30, cached_tokens=cached))
    generation = run(fake.connection())
    assert (generation.input_tokens, generation.output_tokens, generation.cached_tokens) == (
        2000,
        30,
        cached,
    )


def test_cached_tokens_on_a_function_call_reply(fake):
    fake.script(fake.function_call("list_orders", {}, cached_tokens=64))
    assert run(fake.connection()).cached_tokens == 64


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


# --------------------------------------------------------------------------- the fake's checks


def _problems(kind: str, path: str, body: dict, headers: dict | None = None) -> list[str]:
    headers = {"content-type": "application/json", **(headers or {})}
    return check_request(kind, "POST", path, headers, json.dumps(body).encode())


GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:generateContent"


def test_fake_gemini_refuses_cache_with_instructions_and_unpaired_turns():
    cached = {
        "cachedContent": "cachedContents/abc",
        "systemInstruction": {"parts": [{"text": "x"}]},
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
    }
    assert any(
        "CachedContent can not be used" in p for p in _problems("gemini", GEMINI_PATH, cached)
    )
    mismatched = {
        "contents": [
            {"role": "user", "parts": [{"text": "hi"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "a", "args": {}}},
                    {"functionCall": {"name": "b", "args": {}}},
                ],
            },
            {"role": "user", "parts": [{"functionResponse": {"name": "a", "response": {}}}]},
        ]
    }
    assert any(
        "number of function response parts" in p
        for p in _problems("gemini", GEMINI_PATH, mismatched)
    )
    loose = {
        "contents": [
            {"role": "user", "parts": [{"functionResponse": {"name": "a", "response": {}}}]}
        ]
    }
    assert any(
        "immediately after a function call turn" in p
        for p in _problems("gemini", GEMINI_PATH, loose)
    )


def test_fake_gemini_refuses_openapi_parameters_with_additional_properties():
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": PARAMETERS}]}],
    }
    assert any("additionalProperties" in p for p in _problems("gemini", GEMINI_PATH, body))


def test_fake_openai_refuses_unanswered_and_stray_tool_messages():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    unanswered = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "user", "content": "and?"},
        ],
    }
    problems = _problems("openai_compatible", "/v1/chat/completions", unanswered)
    assert any("did not have response messages: c1" in p for p in problems)
    stray = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        ],
    }
    problems = _problems("openai_compatible", "/v1/chat/completions", stray)
    assert any("must be a response to a preceding message" in p for p in problems)


def test_fake_anthropic_refuses_repeated_roles_and_unanswered_tool_use():
    headers = {"anthropic-version": "2023-06-01"}
    repeated = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    }
    problems = _problems("anthropic", "/v1/messages", repeated, headers)
    assert any("alternate" in p for p in problems)
    unanswered = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "a"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
            },
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
        ],
    }
    problems = _problems("anthropic", "/v1/messages", unanswered, headers)
    assert any("without `tool_result` blocks" in p for p in problems)


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("status", "retry_after", "code", "retry_after_s"),
    [
        (429, "4", "provider_rate_limited", 4.0),
        (500, None, "provider_unavailable", None),
        (503, "2", "provider_unavailable", 2.0),
        (400, None, "provider_rejected", None),
    ],
)
def test_http_errors_map_to_codes(fake, status, retry_after, code, retry_after_s):
    fake.script(fake.error(status, f"echo {PROMPT} {ARG_VALUE}", retry_after=retry_after))
    error = failure(fake.connection())
    assert (error.code, error.status, error.retry_after_s) == (code, status, retry_after_s)
    assert len(fake.requests) == 1


def test_a_wrong_key_is_auth_failed(fake):
    error = failure(fake.connection(api_key="sk-wrong"))
    assert error.code == "provider_auth_failed"
    assert fake.problems == []


def test_slow_reply_times_out_at_the_deadline(fake):
    fake.script(fake.success(REPLY, delay_s=3.0))
    started = time.monotonic()
    error = failure(fake.connection(), timeout_s=0.5)
    assert error.code == "provider_timeout"
    assert time.monotonic() - started < 1.5


def test_a_passed_deadline_sends_nothing(fake):
    error = failure(fake.connection(), deadline=time.monotonic() - 0.01)
    assert error.code == "provider_timeout"
    assert fake.requests == []


def test_a_reply_without_text_or_calls_is_a_bad_response(fake):
    fake.script(fake.success("   "))
    error = failure(fake.connection())
    assert (error.code, error.status) == ("provider_bad_response", 200)


def test_malformed_openai_arguments_are_a_bad_response():
    envelope = {
        "model": "gpt-4.1-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "lookup_order", "arguments": '{"order_id": '},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    with FakeProvider("openai_compatible", api_key=KEY) as fake:
        fake.script(fake.raw(json.dumps(envelope).encode()))
        error = failure(fake.connection())
    assert error.code == "provider_bad_response"


def test_non_object_arguments_are_a_bad_response(fake):
    fake.script(fake.function_call("lookup_order", [ARG_VALUE]))  # type: ignore[arg-type]
    assert failure(fake.connection()).code == "provider_bad_response"


def test_malformed_bodies_are_bad_responses(fake):
    fake.script(fake.raw(json.dumps({"unexpected": REPLY}).encode()))
    error = failure(fake.connection())
    assert (error.code, error.status) == ("provider_bad_response", 200)


def test_calls_over_the_limit_are_too_large(fake):
    fake.script(fake.function_call("lookup_order", {"order_id": "x" * 3000}))
    error = failure(fake.connection(max_output_bytes=2048))
    assert error.code == "provider_output_too_large"
    assert "limit=2048" in str(error)


# --------------------------------------------------------------------------- logging


def test_logs_are_content_free(fake, caplog):
    caplog.set_level(logging.DEBUG)
    fake.script(
        fake.function_call("lookup_order", {"order_id": ARG_VALUE}, text=REPLY, cached_tokens=3),
        fake.error(429, f"echo {PROMPT}", retry_after="1"),
    )
    connection = fake.connection(name="runner")
    run(connection, contents=ROUND_TRIP)
    failure(connection)

    records = [r for r in caplog.records if r.name == "ctxadmin.providers"]
    assert [r.getMessage() for r in records] == ["provider_call", "provider_call_failed"]
    ok, failed = records
    assert (ok.operation, ok.connection, ok.kind, ok.model, ok.status) == (
        "generate",
        "runner",
        fake.kind,
        MODELS[fake.kind],
        200,
    )
    assert (ok.text_parts, ok.function_calls, ok.content_count, ok.tool_count) == (1, 1, 3, 2)
    assert (ok.input_tokens, ok.output_tokens, ok.cached_tokens) == (11, 7, 3)
    assert ok.request_bytes > 0 and ok.response_bytes > 0 and ok.output_bytes > 0
    assert (failed.operation, failed.code, failed.status) == (
        "generate",
        "provider_rate_limited",
        429,
    )
    dumped = json.dumps([vars(r) for r in caplog.records], default=str)
    for secret in (*SECRETS, fake.base_url, "127.0.0.1", "lookup_order"):
        assert secret not in dumped


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("kind", ["openai_compatible", "anthropic"])
def test_cached_content_is_gemini_only(kind):
    connection = ProviderConnection("x", kind, "http://127.0.0.1:9", KEY)
    with pytest.raises(ValueError, match="cached_content"):
        run(connection, cached_content="cachedContents/abc")


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"generation_config": {"top_k": 3}}, "unknown keys"),
        ({"generation_config": {"temperature": -1}}, "temperature"),
        ({"generation_config": {"top_p": 1.5}}, "top_p"),
        ({"generation_config": {"max_output_tokens": 0}}, "max_output_tokens"),
        ({"generation_config": {"seed": 1.5}}, "seed"),
        ({"generation_config": {"stop_sequences": "END"}}, "stop_sequences"),
        ({"contents": []}, "contents"),
        ({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "role"),
        ({"contents": [{"role": "user", "parts": [{"function_call": CALL}]}]}, "model"),
        ({"contents": [{"role": "user", "parts": [{"audio": {}}]}]}, "exactly one"),
        ({"tools": [{"name": "f", "strict": True}]}, "unknown keys"),
        ({"tools": [{"description": "no name"}]}, "name"),
        ({"model": " "}, "model"),
    ],
)
def test_arguments_no_provider_accepts_are_value_errors(overrides, match):
    connection = ProviderConnection("x", "gemini", "http://127.0.0.1:9", KEY)
    with pytest.raises(ValueError, match=match):
        run(connection, **overrides)


def test_unserialisable_arguments_are_value_errors(fake):
    call = {**CALL, "args": {"when": object()}}
    contents = [*ROUND_TRIP[:1], {"role": "model", "parts": [{"function_call": call}]}]
    with pytest.raises(ValueError, match="JSON-serialisable"):
        run(fake.connection(), contents=contents)
    assert fake.requests == []
