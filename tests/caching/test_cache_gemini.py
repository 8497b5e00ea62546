"""The Gemini explicit-caching adapter against a local server that speaks the API's format.

``FakeGeminiCache`` checks every request the way Gemini does and records what the real API
would refuse, so ``fake.problems == []`` after a call proves the adapter speaks the format.
Errors and log records are checked for leaks: no resource name, prefix text, key or URL.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.test import override_settings

from caching import gemini
from caching.adapters import CachePrefix, CreatedResource
from caching.gemini import (
    CachedContentGone,
    CachedGeneration,
    GeminiCacheAdapter,
    duration,
    parse_timestamp,
)
from ctxadmin.providers.base import ProviderError
from ctxadmin.testing.fake_gemini_cache import (
    CACHE_CONFLICT_MESSAGE,
    FakeGeminiCache,
    estimate_tokens,
)
from ctxadmin.testing.fake_providers import Reply

MODEL = "gemini-2.5-flash"
KEY = "AIza-KEY-3c9f-do-not-log"
MARKER = "zebra-quartz-marker"
SYSTEM = f"{MARKER} system: you answer questions about the launch plan"
TAG = "0b7e5d1c2a4f4e6b8d9c0a1b2c3d4e5f"
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }
        ]
    }
]
TOOL_CONFIG = {"functionCallingConfig": {"mode": "AUTO"}}
CONTENTS = [
    {"role": "user", "parts": [{"text": f"{MARKER} the launch moved to May"}]},
    {"role": "model", "parts": [{"text": "Noted: May."}]},
]
PREFIX = CachePrefix(
    system_instruction=SYSTEM, tools=TOOLS, tool_config=TOOL_CONFIG, contents=CONTENTS
)
QUESTION = [{"role": "user", "parts": [{"text": "When is the launch?"}]}]


@pytest.fixture
def fake():
    with FakeGeminiCache(api_key=KEY) as server:
        yield server


@pytest.fixture
def adapter(fake) -> GeminiCacheAdapter:
    return GeminiCacheAdapter(fake.base_url, KEY)


def create(adapter: GeminiCacheAdapter, **overrides: object) -> CreatedResource:
    arguments = {
        "model": MODEL,
        "prefix": PREFIX,
        "ttl_ms": 300_000,
        "tag": TAG,
        "timeout_s": 5.0,
        **overrides,
    }
    return adapter.create(**arguments)


def last(fake: FakeGeminiCache, method: str):
    return [r for r in fake.requests if r.method == method][-1]


# --------------------------------------------------------------------------- wire values


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("gemini-3-pro", 4096),
        ("gemini-3-pro-preview", 4096),
        ("models/gemini-3-flash", 4096),
        ("gemini-2.5-flash", 2048),
        ("models/gemini-2.5-pro", 2048),
        ("gemini-2.0-flash", 4096),
        ("some-future-model", 4096),
    ],
)
def test_min_prefix_tokens(model, tokens):
    assert GeminiCacheAdapter("https://example.test", None).min_prefix_tokens(model) == tokens


@pytest.mark.parametrize(
    ("ttl_ms", "text"),
    [(1500, "1.5s"), (300_000, "300s"), (1, "0.001s"), (1000, "1s"), (1010, "1.01s")],
)
def test_ttl_is_a_duration_string(ttl_ms, text):
    assert duration(ttl_ms) == text


@pytest.mark.parametrize("ttl_ms", [0, -1, 1.5, True, "300"])
def test_ttl_must_be_a_positive_integer(ttl_ms):
    with pytest.raises(ValueError):
        duration(ttl_ms)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-09-07T02:18:17.023637828Z", datetime(2026, 9, 7, 2, 18, 17, 23637, tzinfo=UTC)),
        ("2026-09-07T02:18:17.5Z", datetime(2026, 9, 7, 2, 18, 17, 500000, tzinfo=UTC)),
        ("2026-09-07T02:18:17Z", datetime(2026, 9, 7, 2, 18, 17, tzinfo=UTC)),
        ("2026-09-07T04:18:17+02:00", datetime(2026, 9, 7, 2, 18, 17, tzinfo=UTC)),
        ("2026-09-07T02:18:17", None),
        ("2026-13-07T02:18:17Z", None),
        ("soon", None),
        (None, None),
        (1788000000, None),
    ],
)
def test_parse_timestamp(text, expected):
    assert parse_timestamp(text) == expected


def test_repr_and_from_settings_keep_the_key_out(monkeypatch):
    monkeypatch.delenv("CTXADMIN_GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    with override_settings(CTXADMIN_GEMINI_BASE_URL="https://gemini.example.test"):
        fallback = GeminiCacheAdapter.from_settings()
        monkeypatch.setenv("CTXADMIN_GEMINI_API_KEY", "AIza-own-key")
        own = GeminiCacheAdapter.from_settings()
    assert fallback._api_key == KEY
    assert own._api_key == "AIza-own-key"
    assert own.base_url == "https://gemini.example.test"
    assert own.provider == "gemini"
    for adapter in (fallback, own):
        assert KEY not in repr(adapter) and "own-key" not in repr(adapter)
        assert "api_key=set" in repr(adapter)


# --------------------------------------------------------------------------- create


def test_create_sends_a_cached_content_and_reads_the_resource(fake, adapter):
    before = datetime.now(UTC)
    created = create(adapter)

    request = last(fake, "POST")
    assert request.path == "/v1beta/cachedContents"
    assert request.headers["x-goog-api-key"] == KEY
    assert request.json == {
        "model": f"models/{MODEL}",
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "contents": CONTENTS,
        "tools": TOOLS,
        "toolConfig": TOOL_CONFIG,
        "ttl": "300s",
        "displayName": f"ctxadmin-{TAG}",
    }
    record = fake.resources[created.name]
    assert record.display_name == f"ctxadmin-{TAG}"
    assert record.model == f"models/{MODEL}"
    assert created.cached_tokens == record.token_count == estimate_tokens(request.json) > 0
    assert created.expires_at is not None and created.expires_at.tzinfo is not None
    assert abs(created.expires_at - record.expire_time) < timedelta(milliseconds=1)
    assert before + timedelta(seconds=299) < created.expires_at
    assert created.expires_at < datetime.now(UTC) + timedelta(seconds=301)
    assert created.name not in repr(created)
    assert fake.creates == 1
    assert fake.problems == []


@pytest.mark.parametrize(("ttl_ms", "text"), [(1500, "1.5s"), (300_000, "300s"), (1, "0.001s")])
def test_create_ttl_on_the_wire(fake, adapter, ttl_ms, text):
    created = create(adapter, ttl_ms=ttl_ms)
    assert last(fake, "POST").json["ttl"] == text
    expected = datetime.now(UTC) + timedelta(milliseconds=ttl_ms)
    assert abs(created.expires_at - expected) < timedelta(seconds=1)
    assert fake.problems == []


def test_create_leaves_out_empty_members(fake, adapter):
    create(adapter, prefix=CachePrefix(contents=CONTENTS), model=f"models/{MODEL}")
    body = last(fake, "POST").json
    assert set(body) == {"model", "contents", "ttl", "displayName"}
    assert body["model"] == f"models/{MODEL}"
    assert fake.problems == []


def test_create_below_the_minimum_is_rejected(fake, adapter):
    fake.min_tokens = 100_000
    with pytest.raises(ProviderError) as caught:
        create(adapter)
    assert (caught.value.code, caught.value.status) == ("provider_rejected", 400)
    assert fake.resources == {}
    assert fake.problems == []


@pytest.mark.parametrize(
    "body",
    [
        {"name": "files/abc", "expireTime": "2030-01-01T00:00:00Z"},
        {"name": "cachedContents/../secrets"},
        {"displayName": "no name"},
    ],
)
def test_create_reply_without_a_valid_name_is_a_bad_response(fake, adapter, body):
    fake.reply_next(Reply(200, json.dumps(body).encode()), operation="create")
    with pytest.raises(ProviderError) as caught:
        create(adapter)
    assert caught.value.code == "provider_bad_response"


def test_create_reply_that_is_not_json_is_a_bad_response(fake, adapter):
    fake.reply_next(Reply(200, b"<html>gateway</html>", content_type="text/html"))
    with pytest.raises(ProviderError) as caught:
        create(adapter)
    assert caught.value.code == "provider_bad_response"


def test_concurrent_creates_are_all_counted(fake, adapter):
    results: list[CreatedResource] = []
    threads = [threading.Thread(target=lambda: results.append(create(adapter))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert fake.creates == 8
    assert len({r.name for r in results}) == 8 == len(fake.resources)


def test_a_held_create_makes_nothing_until_released(fake, adapter):
    fake.hold_creates()
    results: list[CreatedResource] = []
    worker = threading.Thread(target=lambda: results.append(create(adapter)))
    worker.start()
    assert fake.wait_until_held(1)
    assert fake.resources == {} and results == []
    fake.release_creates()
    worker.join(10)
    assert [r.name for r in results] == list(fake.resources)
    assert fake.held == 0


# --------------------------------------------------------------------------- delete, update, find


@pytest.mark.parametrize("missing_status", [403, 404])
def test_delete_then_already_gone(adapter, fake, missing_status):
    fake.missing_status = missing_status
    created = create(adapter)
    assert adapter.delete(created.name, timeout_s=5) is True
    assert created.name not in fake.resources
    assert adapter.delete(created.name, timeout_s=5) is False
    request = last(fake, "DELETE")
    assert request.path == f"/v1beta/{created.name}"
    assert request.body == b""
    assert fake.deletes == 2
    assert fake.problems == []


def test_delete_of_an_expired_resource_is_already_gone(fake, adapter):
    created = create(adapter)
    fake.expire(created.name)
    assert adapter.delete(created.name, timeout_s=5) is False
    assert fake.problems == []


def test_delete_failure_is_not_already_gone(fake, adapter):
    created = create(adapter)
    fake.fail_next(503, operation="delete")
    with pytest.raises(ProviderError) as caught:
        adapter.delete(created.name, timeout_s=5)
    assert (caught.value.code, caught.value.status) == ("provider_unavailable", 503)
    assert created.name in fake.resources


def test_delete_refuses_a_foreign_name(adapter, fake):
    with pytest.raises(ValueError) as caught:
        adapter.delete("files/abc", timeout_s=5)
    assert "files/abc" not in str(caught.value)
    assert fake.requests == []


def test_update_ttl_changes_the_expiry(fake, adapter):
    created = create(adapter, ttl_ms=60_000)
    new_expiry = adapter.update_ttl(created.name, 3_600_000, timeout_s=5)

    request = last(fake, "PATCH")
    assert request.path == f"/v1beta/{created.name}"
    assert request.query == "updateMask=ttl"
    assert request.json == {"ttl": "3600s"}
    assert new_expiry is not None and new_expiry > created.expires_at + timedelta(seconds=3000)
    assert abs(fake.resources[created.name].expire_time - new_expiry) < timedelta(milliseconds=1)
    assert fake.patches == 1
    assert fake.problems == []


@pytest.mark.parametrize("missing_status", [403, 404])
def test_update_ttl_of_a_gone_resource(fake, adapter, missing_status):
    fake.missing_status = missing_status
    created = create(adapter)
    adapter.delete(created.name, timeout_s=5)
    with pytest.raises(CachedContentGone) as caught:
        adapter.update_ttl(created.name, 60_000, timeout_s=5)
    assert (caught.value.code, caught.value.status) == ("provider_rejected", missing_status)


def test_find_pages_through_the_list(fake, adapter):
    fake.list_page_size = 2
    mine, others = [], []
    for index in range(7):
        if index % 2:
            others.append(create(adapter, tag="another-entry").name)
        else:
            mine.append(create(adapter).name)
    expired = create(adapter).name
    fake.expire(expired)

    assert adapter.find(TAG, timeout_s=5) == mine
    assert adapter.find("another-entry", timeout_s=5) == others
    assert adapter.find("nobody", timeout_s=5) == []

    lists = [r for r in fake.requests if r.method == "GET"]
    assert len(lists) == 3 * 4  # 7 live resources, 2 a page, three finds
    assert "pageToken" not in lists[0].query and "pageToken=" in lists[1].query
    assert fake.problems == []


def test_find_reads_a_bounded_number_of_pages(fake, adapter, monkeypatch):
    monkeypatch.setattr(gemini, "MAX_LIST_PAGES", 3)
    fake.list_page_size = 1
    names = [create(adapter).name for _ in range(5)]
    assert adapter.find(TAG, timeout_s=5) == names[:3]
    assert fake.lists == 3


def test_find_failure(fake, adapter):
    fake.fail_next(500, operation="list")
    with pytest.raises(ProviderError) as caught:
        adapter.find(TAG, timeout_s=5)
    assert (caught.value.code, caught.value.status) == ("provider_unavailable", 500)


# --------------------------------------------------------------------------- generate


def test_generate_reads_the_cache(fake, adapter):
    created = create(adapter)
    config = {"temperature": 0.2, "maxOutputTokens": 256}
    result = adapter.generate(
        model=MODEL,
        resource_name=created.name,
        contents=QUESTION,
        generation_config=config,
        timeout_s=5,
    )

    request = last(fake, "POST")
    assert request.path == f"/v1beta/models/{MODEL}:generateContent"
    assert request.headers["x-goog-api-key"] == KEY
    assert request.json == {
        "cachedContent": created.name,
        "contents": QUESTION,
        "generationConfig": config,
    }
    assert isinstance(result, CachedGeneration)
    assert result.text == fake.reply_text
    assert result.cached_tokens == created.cached_tokens > 0
    assert result.input_tokens > result.cached_tokens
    assert result.output_tokens is not None and result.finish_reason == "STOP"
    assert fake.generates == 1
    assert fake.problems == []


def test_generate_without_config_and_with_a_models_prefix(fake, adapter):
    created = create(adapter)
    adapter.generate(
        model=f"models/{MODEL}", resource_name=created.name, contents=QUESTION, timeout_s=5
    )
    request = last(fake, "POST")
    assert request.path == f"/v1beta/models/{MODEL}:generateContent"
    assert set(request.json) == {"cachedContent", "contents"}
    assert fake.problems == []


@pytest.mark.parametrize("missing_status", [403, 404])
def test_generate_against_a_deleted_cache_is_rejected(fake, adapter, missing_status):
    fake.missing_status = missing_status
    created = create(adapter)
    assert adapter.delete(created.name, timeout_s=5)
    with pytest.raises(ProviderError) as caught:
        adapter.generate(model=MODEL, resource_name=created.name, contents=QUESTION, timeout_s=5)
    assert isinstance(caught.value, CachedContentGone)
    assert (caught.value.code, caught.value.status) == ("provider_rejected", missing_status)
    assert fake.problems == []


def test_generate_against_an_expired_cache_is_rejected(fake, adapter):
    created = create(adapter)
    fake.expire(created.name)
    with pytest.raises(CachedContentGone):
        adapter.generate(model=MODEL, resource_name=created.name, contents=QUESTION, timeout_s=5)
    assert adapter.find(TAG, timeout_s=5) == []


def test_generate_with_another_model_is_a_problem(fake, adapter):
    created = create(adapter)
    with pytest.raises(ProviderError) as caught:
        adapter.generate(
            model="gemini-2.5-pro", resource_name=created.name, contents=QUESTION, timeout_s=5
        )
    assert (caught.value.code, caught.value.status) == ("provider_rejected", 400)
    assert len(fake.problems) == 1 and "has to be the same" in fake.problems[0]


def test_the_fake_refuses_cached_members_beside_cached_content(fake, adapter):
    created = create(adapter)
    for extra in (
        {"systemInstruction": {"parts": [{"text": SYSTEM}]}},
        {"tools": TOOLS},
        {"toolConfig": TOOL_CONFIG},
    ):
        response = httpx.post(
            f"{fake.base_url}/v1beta/models/{MODEL}:generateContent",
            json={"cachedContent": created.name, "contents": QUESTION, **extra},
            headers={"x-goog-api-key": KEY},
        )
        assert response.status_code == 400
        assert response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert fake.problems == [CACHE_CONFLICT_MESSAGE] * 3
    assert fake.generates == 0


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"model": MODEL, "ttl": "300s"}, "model must be models/{model}"),
        ({"model": "models/x", "ttl": "300"}, "ttl must be a Duration"),
        ({"model": "models/x", "ttl": "1s", "expireTime": "2030-01-01T00:00:00Z"}, "exclusive"),
        ({"model": "models/x", "contents": [{"role": "system", "parts": []}]}, "contents must"),
        ({"model": "models/x", "systemInstruction": "be brief"}, "systemInstruction must"),
        ({"model": "models/x", "cacheControl": {}}, "unknown body fields"),
    ],
)
def test_the_fake_refuses_malformed_creates(fake, body, problem):
    response = httpx.post(
        f"{fake.base_url}/v1beta/cachedContents", json=body, headers={"x-goog-api-key": KEY}
    )
    assert response.status_code == 400
    assert any(problem in p for p in fake.problems)
    assert fake.creates == 0


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("status", "retry_after", "code", "retry_after_s"),
    [
        (429, "3", "provider_rate_limited", 3.0),
        (500, None, "provider_unavailable", None),
        (503, "7", "provider_unavailable", 7.0),
    ],
)
def test_provider_failures_are_coded(fake, adapter, status, retry_after, code, retry_after_s):
    fake.fail_next(status, 2, operation="create", retry_after=retry_after)
    for _ in range(2):
        with pytest.raises(ProviderError) as caught:
            create(adapter)
        error = caught.value
        assert (error.code, error.status, error.retry_after_s) == (code, status, retry_after_s)
    assert fake.resources == {}
    create(adapter)
    assert len(fake.resources) == 1
    assert fake.creates == 3


@pytest.mark.parametrize(("api_key", "status"), [("AIza-wrong", 400), (None, 403)])
def test_a_wrong_or_missing_key_is_an_auth_failure(fake, api_key, status):
    adapter = GeminiCacheAdapter(fake.base_url, api_key)
    with pytest.raises(ProviderError) as caught:
        create(adapter)
    assert (caught.value.code, caught.value.status) == ("provider_auth_failed", status)
    with pytest.raises(ProviderError) as caught:
        adapter.delete("cachedContents/abc123", timeout_s=5)
    assert caught.value.code == "provider_auth_failed"
    assert fake.creates == 0 and fake.deletes == 0


def test_a_server_that_is_gone_is_unavailable(fake, adapter):
    fake.stop()
    with pytest.raises(ProviderError) as caught:
        create(adapter)
    assert caught.value.code == "provider_unavailable"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_slow_create_times_out_and_find_recovers_it(fake, adapter):
    fake.create_delay_s = 1.0
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        create(adapter, timeout_s=0.3)
    assert caught.value.code == "provider_timeout"
    assert time.monotonic() - started < 0.9
    # The provider made the resource anyway, once its delay ran out.
    deadline = time.monotonic() + 5
    while not fake.resources and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(fake.resources) == 1
    assert adapter.find(TAG, timeout_s=5) == list(fake.resources)


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf")])
def test_timeout_must_be_a_positive_number(adapter, timeout_s):
    with pytest.raises(ValueError):
        create(adapter, timeout_s=timeout_s)


# --------------------------------------------------------------------------- content freedom


def test_logs_and_errors_are_content_free(fake, adapter, caplog):
    caplog.set_level(logging.DEBUG)
    echo = f"could not cache {MARKER} with key {KEY}"
    errors: list[BaseException] = []

    created = create(adapter)
    adapter.generate(model=MODEL, resource_name=created.name, contents=QUESTION, timeout_s=5)
    adapter.update_ttl(created.name, 60_000, timeout_s=5)
    assert adapter.find(TAG, timeout_s=5) == [created.name]
    assert adapter.delete(created.name, timeout_s=5) is True
    assert adapter.delete(created.name, timeout_s=5) is False
    for failing in (
        lambda: adapter.generate(
            model=MODEL, resource_name=created.name, contents=QUESTION, timeout_s=5
        ),
        lambda: adapter.update_ttl(created.name, 1000, timeout_s=5),
    ):
        with pytest.raises(ProviderError) as caught:
            failing()
        errors.append(caught.value)
    for status in (429, 500, 400):
        fake.fail_next(status, message=echo, retry_after="1")
        with pytest.raises(ProviderError) as caught:
            create(adapter)
        errors.append(caught.value)
    fake.create_delay_s = 1.0
    with pytest.raises(ProviderError) as caught:
        create(adapter, timeout_s=0.2)
    errors.append(caught.value)
    fake.create_delay_s = 0
    with pytest.raises(ProviderError) as caught:
        GeminiCacheAdapter(fake.base_url, "AIza-wrong").delete(created.name, timeout_s=5)
    errors.append(caught.value)
    base_url = fake.base_url
    fake.stop()
    with pytest.raises(ProviderError) as caught:
        adapter.delete(created.name, timeout_s=5)
    errors.append(caught.value)

    records = [r for r in caplog.records if r.name == "ctxadmin.providers"]
    assert [r.getMessage() for r in records] == [
        "cache_call",
        "cache_call",
        "cache_call",
        "cache_call",
        "cache_call",
        "cache_call",
        *["cache_call_failed"] * 8,
    ]
    assert [r.operation for r in records[:6]] == [
        "create",
        "generate",
        "update_ttl",
        "find",
        "delete",
        "delete",
    ]
    ok_create, ok_generate = records[:2]
    assert ok_create.cached_tokens == created.cached_tokens
    assert ok_generate.cached_tokens == created.cached_tokens
    assert ok_create.request_bytes > 0 and ok_create.response_bytes > 0
    assert ok_create.status == 200 and ok_create.duration_ms >= 0
    assert [r.code for r in records[6:]] == [
        "provider_rejected",
        "provider_rejected",
        "provider_rate_limited",
        "provider_unavailable",
        "provider_rejected",
        "provider_timeout",
        "provider_auth_failed",
        "provider_unavailable",
    ]

    forbidden = (created.name, created.name.split("/")[1], MARKER, KEY, base_url, "127.0.0.1")
    dumped = [record.getMessage() for record in caplog.records]
    dumped += [str(value) for record in caplog.records for value in vars(record).values()]
    for error in errors:
        dumped += [str(error), repr(error), *traceback.format_exception(error)]
    for secret in forbidden:
        assert not [text for text in dumped if secret in text], secret
