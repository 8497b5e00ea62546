"""The fake provider servers refuse what the real APIs refuse in a ``generate`` request, so a
test that sees ``fake.problems == []`` proves the request is well formed (no database)."""

from __future__ import annotations

import json

from ctxadmin.testing.fake_providers import check_request
from tests.generate_helpers import (
    PARAMETERS,
)

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
