"""The Gemini explicit-caching adapter against a local server that speaks the API's format:
wire values, create, delete, update_ttl and find.

``FakeGeminiCache`` checks every request the way Gemini does and records what the real API
would refuse, so ``fake.problems == []`` after a call proves the adapter speaks the format.
Reading a cache, failures and content freedom are in ``test_cache_gemini_generate``."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

import ctxadmin.providers.gemini_caches as gemini_caches
from caching.adapters import CachePrefix, CreatedResource, GeminiCacheAdapter
from ctxadmin.providers.base import ProviderError
from ctxadmin.providers.gemini_caches import (
    CachedContentGone,
    duration,
    parse_timestamp,
)
from ctxadmin.testing.fake_gemini_cache import (
    estimate_tokens,
)
from ctxadmin.testing.fake_providers import Reply
from tests.caching.gemini.helpers import (
    CONTENTS,
    KEY,
    MODEL,
    SYSTEM,
    TAG,
    TOOL_CONFIG,
    TOOLS,
    create,
    last,
)

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
    monkeypatch.setattr(gemini_caches, "MAX_LIST_PAGES", 3)
    fake.list_page_size = 1
    names = [create(adapter).name for _ in range(5)]
    assert adapter.find(TAG, timeout_s=5) == names[:3]
    assert fake.lists == 3


def test_find_failure(fake, adapter):
    fake.fail_next(500, operation="list")
    with pytest.raises(ProviderError) as caught:
        adapter.find(TAG, timeout_s=5)
    assert (caught.value.code, caught.value.status) == ("provider_unavailable", 500)
