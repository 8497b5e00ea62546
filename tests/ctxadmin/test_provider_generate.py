"""``generate`` (one model call with tools) against local servers that speak each provider's
wire format (no database): the replies back in ctxadmin's event format (text, function
calls, usage), the failures, content-free logs and the arguments no provider accepts.

The request formats are pinned in ``test_provider_generate_requests``, the fake servers'
own checks in ``test_provider_generate_fakes``."""

from __future__ import annotations

import json
import logging
import time

import pytest

from ctxadmin.providers import KINDS, ProviderConnection
from ctxadmin.providers.generate import Generation
from ctxadmin.testing.fake_providers import FakeProvider
from tests.generate_helpers import (
    ARG_VALUE,
    CALL,
    CALL_FINISH,
    FINISH,
    KEY,
    MODELS,
    PROMPT,
    REPLY,
    ROUND_TRIP,
    SECRETS,
    failure,
    run,
)


@pytest.fixture(params=sorted(KINDS))
def fake(request):
    with FakeProvider(request.param, api_key=KEY) as server:
        yield server


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
