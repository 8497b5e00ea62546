"""The Gemini explicit-caching adapter against a local server that speaks the API's format:
``generateContent`` reading a cache, coded failures, and content freedom (errors and log
records carry no resource name, prefix text, key or URL)."""

from __future__ import annotations

import logging
import time
import traceback

import httpx
import pytest

from caching.adapters import GeminiCacheAdapter
from ctxadmin.providers.base import ProviderError
from ctxadmin.providers.gemini_caches import (
    CachedContentGone,
    CachedGeneration,
)
from ctxadmin.testing.fake_gemini_cache import (
    CACHE_CONFLICT_MESSAGE,
)
from tests.caching.gemini.helpers import (
    KEY,
    MARKER,
    MODEL,
    QUESTION,
    SYSTEM,
    TAG,
    TOOL_CONFIG,
    TOOLS,
    create,
    last,
)

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
