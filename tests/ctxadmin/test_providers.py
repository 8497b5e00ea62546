"""Provider clients against local servers that speak each provider's real wire format.

The fake servers check every request the way the real APIs do (path, key header, body
fields) and answer with the providers' own envelopes, so these tests pin both directions of
the format. Error messages and log records are checked for leaks: no prompt, no reply, no
key, no query string of the base URL.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from ctxadmin import stack
from ctxadmin.providers import (
    KINDS,
    Completion,
    ProviderConnection,
    ProviderError,
    UnknownConnection,
    complete_json,
    connections_from_settings,
    get_connection,
    parse_providers,
)
from ctxadmin.providers.base import parse_retry_after
from ctxadmin.providers.clients import json_instruction, strip_json_fence
from ctxadmin.testing.fake_providers import FakeProvider

PROMPT = "PROMPT-7f3a: summarise what the user said about the launch"
SYSTEM = "SYSTEM-91bc: you write compaction summaries"
KEY = "sk-KEY-5d2e-do-not-log"
REPLY_MARKER = "RESPONSE-c4e1"
REPLY = json.dumps({"summary": f"{REPLY_MARKER} the launch moved to May"})
SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}
MODELS = {
    "gemini": "gemini-2.5-flash",
    "openai_compatible": "gpt-4.1-mini",
    "anthropic": "claude-sonnet-4-5",
}
FINISH = {"gemini": "STOP", "openai_compatible": "stop", "anthropic": "end_turn"}
# What a provider might echo back in an error body; none of it may reach our messages.
ECHO = f"could not process {PROMPT!r} with key {KEY}: {REPLY}"


@pytest.fixture(params=sorted(KINDS))
def fake(request):
    with FakeProvider(request.param, api_key=KEY) as server:
        yield server


def call(
    connection: ProviderConnection, *, timeout_s: float = 5.0, **overrides: object
) -> Completion:
    arguments = {
        "model": MODELS[connection.kind],
        "system": SYSTEM,
        "prompt": PROMPT,
        "schema": SCHEMA,
        "deadline": time.monotonic() + timeout_s,
        **overrides,
    }
    return complete_json(connection, **arguments)


def failure(connection: ProviderConnection, **overrides: object) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        call(connection, **overrides)
    assert_no_leak(caught.value, connection)
    return caught.value


def assert_no_leak(error: ProviderError, connection: ProviderConnection) -> None:
    for text in (str(error), repr(error), *map(str, error.args)):
        for secret in (PROMPT, SYSTEM, KEY, REPLY_MARKER, "PROMPT-7f3a", connection.base_url):
            assert secret not in text
    # The cause would be printed with the traceback: it must not carry the request either.
    assert error.__cause__ is None


# --------------------------------------------------------------------------- success, per kind


def test_gemini_request_and_reply():
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.success(REPLY, input_tokens=120, output_tokens=30))
        completion = call(fake.connection(), max_output_tokens=512)

        assert fake.problems == []
        [request] = fake.requests
        assert request.path == "/v1beta/models/gemini-2.5-flash:generateContent"
        assert request.headers["x-goog-api-key"] == KEY
        assert "authorization" not in request.headers
        body = request.json
        assert body["systemInstruction"] == {"parts": [{"text": SYSTEM}]}
        assert body["contents"] == [{"role": "user", "parts": [{"text": PROMPT}]}]
        config = body["generationConfig"]
        assert config["responseMimeType"] == "application/json"
        # JSON Schema goes to responseJsonSchema: responseSchema refuses additionalProperties.
        assert config["responseJsonSchema"] == SCHEMA
        assert "responseSchema" not in config
        assert config["temperature"] == 0.0
        assert config["maxOutputTokens"] == 512
    assert completion == Completion(
        text=REPLY,
        input_tokens=120,
        output_tokens=30,
        finish_reason="STOP",
        model="gemini-2.5-flash",
    )


def test_openai_compatible_request_and_reply():
    with FakeProvider("openai_compatible", api_key=KEY) as fake:
        fake.script(fake.success(REPLY, input_tokens=80, output_tokens=20))
        completion = call(fake.connection(), max_output_tokens=256, temperature=0.2)

        assert fake.problems == []
        [request] = fake.requests
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert request.json == {
            "model": "gpt-4.1-mini",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": PROMPT},
            ],
            "temperature": 0.2,
            "max_tokens": 256,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "summary", "schema": SCHEMA, "strict": False},
            },
        }
    assert completion == Completion(REPLY, 80, 20, "stop", "gpt-4.1-mini")


def test_anthropic_request_and_reply():
    with FakeProvider("anthropic", api_key=KEY) as fake:
        fake.script(fake.success(REPLY, input_tokens=90, output_tokens=25))
        completion = call(fake.connection())

        assert fake.problems == []
        [request] = fake.requests
        assert request.path == "/v1/messages"
        assert request.headers["x-api-key"] == KEY
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in request.headers
        body = request.json
        assert body["model"] == "claude-sonnet-4-5"
        assert body["max_tokens"] == 4096  # required by the API; the default when not given
        assert body["system"] == SYSTEM
        assert body["temperature"] == 0.0
        [message] = body["messages"]
        assert message["role"] == "user"
        # No structured-output parameter: the schema travels in the prompt.
        assert message["content"].startswith(PROMPT)
        assert message["content"].endswith(json_instruction(SCHEMA))
        assert json.dumps(SCHEMA, sort_keys=True) in message["content"]
    assert completion == Completion(REPLY, 90, 25, "end_turn", "claude-sonnet-4-5")


def test_finish_reason_and_model_come_from_the_reply(fake):
    fake.script(fake.success(REPLY))
    completion = call(fake.connection())
    assert completion.finish_reason == FINISH[fake.kind]
    assert completion.model == MODELS[fake.kind]
    assert (completion.input_tokens, completion.output_tokens) == (11, 7)


def test_empty_system_prompt_is_left_out(fake):
    fake.script(fake.success(REPLY))
    call(fake.connection(), system="")
    assert fake.problems == []
    body = fake.requests[0].json
    assert "systemInstruction" not in body
    assert "system" not in body
    assert all(m.get("role") != "system" for m in body.get("messages", []))


def test_anthropic_code_fence_is_stripped():
    with FakeProvider("anthropic", api_key=KEY) as fake:
        fake.script(fake.success(f"```json\n{REPLY}\n```"))
        assert call(fake.connection()).text == REPLY


def test_strip_json_fence():
    assert strip_json_fence('```json\n{"a": 1}\n```') == '{"a": 1}'
    assert strip_json_fence('  ```\n{"a": 1}\n```  \n') == '{"a": 1}'
    assert strip_json_fence('{"a": "```"}') == '{"a": "```"}'


def test_gemini_thought_parts_are_not_the_answer():
    envelope = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"text": "thinking it over", "thought": True}, {"text": REPLY}],
                },
                "finishReason": "STOP",
            }
        ],
    }
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.raw(json.dumps(envelope).encode()))
        completion = call(fake.connection())
    assert completion.text == REPLY
    assert completion.input_tokens is None
    assert completion.model == "gemini-2.5-flash"  # the one asked for, when not reported


def test_openai_base_url_ending_in_v1_is_not_doubled_and_keyless_servers_work():
    with FakeProvider("openai_compatible", api_key=None) as fake:
        fake.script(fake.success(REPLY))
        call(fake.connection(base_url=f"{fake.base_url}/v1/"))
        assert fake.problems == []
        [request] = fake.requests
        assert request.path == "/v1/chat/completions"
        assert "authorization" not in request.headers


def test_base_url_query_is_kept_on_the_request_and_out_of_errors():
    with FakeProvider("openai_compatible", api_key=KEY) as fake:
        connection = fake.connection(base_url=f"{fake.base_url}/v1?tenant=QUERY-77")
        fake.script(fake.success(REPLY), fake.error(500, ECHO))
        call(connection)
        error = failure(connection)
        assert fake.requests[0].query == "tenant=QUERY-77"
    assert "QUERY-77" not in str(error)


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("status", "retry_after", "code", "retry_after_s"),
    [
        (429, "7", "provider_rate_limited", 7.0),
        (429, None, "provider_rate_limited", None),
        (500, None, "provider_unavailable", None),
        (503, "2.5", "provider_unavailable", 2.5),
        (401, None, "provider_auth_failed", None),
        (403, None, "provider_auth_failed", None),
        (400, None, "provider_rejected", None),
        (404, None, "provider_rejected", None),
    ],
)
def test_http_errors_map_to_codes(fake, status, retry_after, code, retry_after_s):
    fake.script(fake.error(status, ECHO, retry_after=retry_after))
    error = failure(fake.connection())
    assert (error.code, error.status, error.retry_after_s) == (code, status, retry_after_s)
    assert len(fake.requests) == 1  # no retries inside


def test_a_wrong_key_is_auth_failed(fake):
    error = failure(fake.connection(api_key="sk-wrong"))
    assert error.code == "provider_auth_failed"
    # Gemini answers a bad key with 400 INVALID_ARGUMENT, reason API_KEY_INVALID.
    assert error.status == (400 if fake.kind == "gemini" else 401)
    assert fake.problems == []


def test_a_missing_key_is_auth_failed(fake):
    error = failure(fake.connection(api_key=None))
    assert error.code == "provider_auth_failed"
    assert error.status == (403 if fake.kind == "gemini" else 401)


def test_a_gemini_400_without_the_key_reason_stays_rejected():
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.error(400, ECHO))
        assert failure(fake.connection()).code == "provider_rejected"


@pytest.mark.parametrize(
    "body",
    [
        f"<html>502 upstream said {REPLY_MARKER}</html>".encode(),
        b"",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        json.dumps({"unexpected": REPLY_MARKER}).encode(),
    ],
    ids=["html", "empty", "binary", "array", "wrong-shape"],
)
def test_malformed_bodies_are_bad_responses(fake, body):
    fake.script(fake.raw(body))
    error = failure(fake.connection())
    assert (error.code, error.status) == ("provider_bad_response", 200)


def test_an_empty_answer_is_a_bad_response(fake):
    fake.script(fake.success("  "))
    assert failure(fake.connection()).code == "provider_bad_response"


def test_gemini_blocked_prompt():
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.blocked("SAFETY"))
        error = failure(fake.connection())
    assert error.code == "provider_bad_response"
    assert "block_reason=SAFETY" in str(error)


def test_gemini_candidate_stopped_by_safety_without_content():
    envelope = {"candidates": [{"finishReason": "SAFETY", "index": 0}]}
    with FakeProvider("gemini", api_key=KEY) as fake:
        fake.script(fake.raw(json.dumps(envelope).encode()))
        error = failure(fake.connection())
    assert error.code == "provider_bad_response"
    assert "finish_reason=SAFETY" in str(error)


def test_openai_refusal_is_a_bad_response():
    envelope = {
        "model": "gpt-4.1-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": REPLY_MARKER},
                "finish_reason": "stop",
            }
        ],
    }
    with FakeProvider("openai_compatible", api_key=KEY) as fake:
        fake.script(fake.raw(json.dumps(envelope).encode()))
        assert failure(fake.connection()).code == "provider_bad_response"


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


def test_connection_refused_is_unavailable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    connection = ProviderConnection("down", "openai_compatible", f"http://127.0.0.1:{port}", KEY)
    error = failure(connection)
    assert (error.code, error.status) == ("provider_unavailable", None)


def test_text_over_the_limit_is_too_large(fake):
    fake.script(fake.success(json.dumps({"summary": "x" * 3000})))
    error = failure(fake.connection(max_output_bytes=2048))
    assert error.code == "provider_output_too_large"
    assert "limit=2048" in str(error)


@pytest.mark.parametrize("send_length", [True, False], ids=["content-length", "until-close"])
def test_an_oversize_body_is_cut_off(fake, send_length):
    # 2 KiB allowed: the envelope cap is 4 x 2 KiB + 64 KiB, far below 1 MiB.
    body = b'{"padding": "' + b"y" * (1024 * 1024) + b'"}'
    fake.script(fake.raw(body, send_length=send_length))
    error = failure(fake.connection(max_output_bytes=2048))
    assert error.code == "provider_output_too_large"


# --------------------------------------------------------------------------- logging


def test_logs_are_content_free(fake, caplog):
    caplog.set_level(logging.DEBUG, logger="ctxadmin.providers")
    fake.script(fake.success(REPLY), fake.error(429, ECHO, retry_after="1"))
    connection = fake.connection(name="summariser")
    call(connection)
    failure(connection)

    records = [r for r in caplog.records if r.name == "ctxadmin.providers"]
    assert [r.getMessage() for r in records] == ["provider_call", "provider_call_failed"]
    ok, failed = records
    assert (ok.connection, ok.kind, ok.model, ok.status) == (
        "summariser",
        fake.kind,
        MODELS[fake.kind],
        200,
    )
    assert (ok.input_tokens, ok.output_tokens, ok.output_bytes) == (11, 7, len(REPLY))
    assert ok.request_bytes > 0 and ok.response_bytes > 0 and ok.duration_ms >= 0
    assert (failed.code, failed.status) == ("provider_rate_limited", 429)
    dumped = json.dumps([vars(r) for r in records], default=str)
    for secret in (PROMPT, SYSTEM, KEY, REPLY_MARKER, fake.base_url, "127.0.0.1"):
        assert secret not in dumped


def test_httpx_request_lines_stay_out_of_the_logs():
    """httpx logs each request's full URL (query included) at INFO."""
    assert logging.getLogger("httpx").getEffectiveLevel() >= logging.WARNING
    assert logging.getLogger("httpcore").getEffectiveLevel() >= logging.WARNING


# --------------------------------------------------------------------------- arguments and errors


@pytest.mark.parametrize(
    "overrides",
    [
        {"temperature": float("nan")},
        {"temperature": -0.1},
        {"max_output_tokens": 0},
        {"max_output_tokens": True},
        {"model": " "},
    ],
)
def test_arguments_no_provider_accepts_are_value_errors(overrides):
    connection = ProviderConnection("x", "gemini", "http://127.0.0.1:9", KEY)
    with pytest.raises(ValueError, match=r"temperature|max_output_tokens|model"):
        call(connection, **overrides)


def test_provider_error_codes_are_closed():
    with pytest.raises(ValueError):
        ProviderError("provider_exploded")
    error = ProviderError("provider_rate_limited", status=429, retry_after_s=1.5)
    assert str(error) == "provider_rate_limited status=429 retry_after_s=1.5"


def test_retry_after_forms():
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0


def test_connection_repr_hides_the_key():
    connection = ProviderConnection("main", "anthropic", "https://api.anthropic.com", KEY)
    assert KEY not in repr(connection)
    with pytest.raises(ValueError, match="kind"):
        ProviderConnection("main", "bard", "https://example.com", KEY)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- configuration


def test_connections_from_settings_read_keys_from_the_environment(monkeypatch):
    monkeypatch.setenv("CTXADMIN_TEST_GEMINI_KEY", KEY)
    monkeypatch.delenv("CTXADMIN_TEST_UNSET_KEY", raising=False)
    configured = {
        "gemini": {
            "kind": "gemini",
            "base_url": "https://generativelanguage.googleapis.com",
            "api_key_env": "CTXADMIN_TEST_GEMINI_KEY",
        },
        "local": {
            "kind": "openai_compatible",
            "base_url": "http://127.0.0.1:11434/v1",
            "api_key_env": "CTXADMIN_TEST_UNSET_KEY",
            "max_output_bytes": 4096,
        },
    }
    with override_settings(CTXADMIN_PROVIDERS=configured):
        connections = connections_from_settings()
        assert connections["gemini"].api_key == KEY
        assert connections["gemini"].max_output_bytes == 256 * 1024
        assert connections["local"].api_key is None
        assert connections["local"].max_output_bytes == 4096
        assert get_connection("gemini") == connections["gemini"]
        with pytest.raises(UnknownConnection) as caught:
            get_connection("missing")
        assert isinstance(caught.value, KeyError)
        assert "missing" in str(caught.value)
        # The key changes with the environment, not with the settings.
        monkeypatch.setenv("CTXADMIN_TEST_GEMINI_KEY", "sk-rotated")
        assert get_connection("gemini").api_key == "sk-rotated"
    assert KEY not in json.dumps(configured)


def test_key_from_a_file(monkeypatch, tmp_path):
    (tmp_path / "key").write_text(f"{KEY}\n")
    monkeypatch.setenv("CTXADMIN_TEST_FILE_KEY_FILE", str(tmp_path / "key"))
    monkeypatch.delenv("CTXADMIN_TEST_FILE_KEY", raising=False)
    configured = {
        "claude": {
            "kind": "anthropic",
            "base_url": "https://api.anthropic.com",
            "api_key_env": "CTXADMIN_TEST_FILE_KEY",
        }
    }
    with override_settings(CTXADMIN_PROVIDERS=configured):
        assert get_connection("claude").api_key == KEY


def test_parse_providers_accepts_a_valid_object():
    text = json.dumps(
        {
            "gemini-main": {"kind": "gemini", "base_url": "https://g.example"},
            "vllm_1": {
                "kind": "openai_compatible",
                "base_url": "http://vllm:8000/v1",
                "max_output_bytes": 65536,
            },
        }
    )
    assert set(parse_providers(text)) == {"gemini-main", "vllm_1"}
    assert parse_providers(None) == {}
    assert parse_providers("{}") == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{not json", "must be a JSON object"),
        ("[]", "must be a JSON object"),
        ('{"Main": {"kind": "gemini", "base_url": "https://g"}}', "connection names"),
        ('{"": {"kind": "gemini", "base_url": "https://g"}}', "connection names"),
        ('{"m": "gemini"}', "must be an object"),
        ('{"m": {"base_url": "https://g"}}', "missing \\['kind'\\]"),
        ('{"m": {"kind": "gemini", "base_url": "https://g", "api_key": "x"}}', "unknown keys"),
        ('{"m": {"kind": "bard", "base_url": "https://g"}}', "kind must be one of"),
        ('{"m": {"kind": "gemini", "base_url": "ftp://g"}}', "http\\(s\\) URL"),
        ('{"m": {"kind": "gemini", "base_url": "https://"}}', "http\\(s\\) URL"),
        ('{"m": {"kind": "gemini", "base_url": "https://g:99999"}}', "not a valid URL"),
        ('{"m": {"kind": "gemini", "base_url": 7}}', "must be a string"),
        ('{"m": {"kind": "gemini", "base_url": "https://g", "api_key_env": "A-B"}}', "api_key_env"),
        (
            '{"m": {"kind": "gemini", "base_url": "https://g", "max_output_bytes": true}}',
            "max_output_bytes",
        ),
        (
            '{"m": {"kind": "gemini", "base_url": "https://g", "max_output_bytes": 10}}',
            "max_output_bytes",
        ),
    ],
)
def test_parse_providers_refuses_junk(value, message):
    with pytest.raises(ImproperlyConfigured, match=message) as caught:
        parse_providers(value)
    assert "CTXADMIN_PROVIDERS" in str(caught.value)


def test_base_url_is_never_repeated_in_a_configuration_error():
    value = '{"m": {"kind": "gemini", "base_url": "gopher://h/?key=TOKEN-3b"}}'
    with pytest.raises(ImproperlyConfigured) as caught:
        parse_providers(value)
    assert "TOKEN-3b" not in str(caught.value)


def test_settings_module_refuses_junk_providers_at_import():
    env = {**os.environ, "CTXADMIN_PROVIDERS": '{"m": {"kind": "bard", "base_url": "https://g"}}'}
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=stack.PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "CTXADMIN_PROVIDERS['m'].kind must be one of" in result.stderr
