"""The HTTP embedders against local servers that speak the OpenAI-compatible and Gemini embedding
formats (see ``ctxadmin.testing.fake_embeddings``): request shapes, batching, errors, leaks
and log lines; and the embedding task isolating an entry the embedder refuses."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest

import memory.embedders as embeddings_module
from ctxadmin.providers import ProviderConnection
from ctxadmin.testing.fake_embeddings import FakeEmbeddings, fake_vector
from memory.embedders import (
    EmbeddingError,
    EmbeddingLimits,
    GeminiEmbedder,
    OpenAICompatibleEmbedder,
    embed_all,
)
from tests.embedding_helpers import (
    KEY,
    MODELS,
    SECRET_TEXT,
    TEXTS,
    failure,
    http_embedder,
    numbered,
    soon,
)


@pytest.fixture(params=sorted(MODELS))
def fake(request):
    with FakeEmbeddings(request.param, api_key=KEY, dimension=8) as server:
        yield server


# --------------------------------------------------------------------------- HTTP embedders


def test_openai_request_shape_and_reply_order_by_index():
    with FakeEmbeddings("openai_compatible", api_key=KEY, dimension=8) as fake:
        fake.script(fake.success(reverse=True))
        embedder = http_embedder(fake)
        vectors = embed_all(embedder, TEXTS, deadline=soon())

        assert fake.problems == []
        [request] = fake.requests
        assert request.path == "/v1/embeddings"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert request.json == {
            "model": "text-embedding-3-small",
            "input": TEXTS,
            "encoding_format": "float",
        }
    assert vectors == [pytest.approx(fake_vector(text, 8)) for text in TEXTS]
    assert embedder.name == "openai_compatible:text-embedding-3-small"
    assert embedder.remote is True


def test_openai_base_url_ending_in_v1_is_not_doubled():
    with FakeEmbeddings("openai_compatible", api_key=None, dimension=8) as fake:
        embedder = http_embedder(fake, fake.connection(base_url=fake.base_url + "/v1/"))
        embed_all(embedder, ["a"], deadline=soon())
        assert [r.path for r in fake.requests] == ["/v1/embeddings"]
        assert "authorization" not in fake.requests[0].headers
        assert fake.problems == []


def test_openai_can_ask_for_the_dimension():
    with FakeEmbeddings("openai_compatible", api_key=KEY, dimension=1536) as fake:
        embedder = http_embedder(fake, dimension=16, request_dimensions=True)
        vectors = embed_all(embedder, ["a", "b"], deadline=soon())
        assert fake.requests[0].json["dimensions"] == 16
        assert [len(v) for v in vectors] == [16, 16]
        assert fake.problems == []


def test_openai_reply_without_indices_is_taken_in_order():
    with FakeEmbeddings("openai_compatible", api_key=KEY, dimension=8) as fake:
        fake.script(fake.success(drop_index=True))
        vectors = embed_all(http_embedder(fake), TEXTS, deadline=soon())
    assert vectors == [pytest.approx(fake_vector(text, 8)) for text in TEXTS]


def test_gemini_request_shape_and_reply():
    with FakeEmbeddings("gemini", api_key=KEY, dimension=8) as fake:
        embedder = GeminiEmbedder(fake.connection(), "models/gemini-embedding-001", dimension=8)
        vectors = embed_all(embedder, TEXTS, deadline=soon())

        assert fake.problems == []
        [request] = fake.requests
        assert request.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
        assert request.headers["x-goog-api-key"] == KEY
        assert "authorization" not in request.headers
        assert request.json == {
            "requests": [
                {
                    "model": "models/gemini-embedding-001",
                    "content": {"parts": [{"text": text}]},
                    "outputDimensionality": 8,
                }
                for text in TEXTS
            ]
        }
    assert vectors == [pytest.approx(fake_vector(text, 8)) for text in TEXTS]
    assert embedder.name == "gemini:gemini-embedding-001"
    assert embedder.remote is True


def test_gemini_batches_hold_at_most_100_requests():
    with FakeEmbeddings("gemini", api_key=KEY, dimension=4) as fake:
        embedder = GeminiEmbedder(fake.connection(), "gemini-embedding-001", dimension=4)
        vectors = embed_all(embedder, numbered(150), deadline=soon())
        assert [len(fake.inputs(r)) for r in fake.requests] == [100, 50]
        assert fake.problems == []
    assert vectors == [pytest.approx(fake_vector(text, 4)) for text in numbered(150)]


def test_http_embedders_batch_like_everything_else(fake):
    embed_all(http_embedder(fake), numbered(300), deadline=soon(20))
    expected = [100, 100, 100] if fake.kind == "gemini" else [128, 128, 44]
    assert [len(fake.inputs(r)) for r in fake.requests] == expected
    assert fake.problems == []


def test_wrong_dimension_is_a_bad_response(fake):
    fake.script(fake.success(dimension=7))
    error = failure(http_embedder(fake))
    assert error.code == "embedding_bad_response"
    assert "7 values, expected 8" in str(error)


def test_429_is_rate_limited_with_retry_after(fake):
    fake.script(fake.error(429, f"slow down: {SECRET_TEXT}", retry_after="3"))
    error = failure(http_embedder(fake))
    assert (error.code, error.status, error.retry_after_s) == ("embedding_rate_limited", 429, 3)


@pytest.mark.parametrize("status", [500, 503, 400, 404])
def test_other_statuses_are_provider_errors(fake, status):
    fake.script(fake.error(status, f"echo {SECRET_TEXT} {KEY}", retry_after="7"))
    error = failure(http_embedder(fake))
    assert (error.code, error.status) == ("embedding_provider_error", status)
    assert error.retry_after_s == (7 if status >= 500 else None)


def test_a_wrong_key_is_a_provider_error(fake):
    error = failure(http_embedder(fake, fake.connection(api_key="sk-wrong")))
    assert error.code == "embedding_provider_error"
    assert error.status in {400, 401}


def test_key_header_is_sent_only_when_there_is_a_key():
    for kind, header in (("openai_compatible", "authorization"), ("gemini", "x-goog-api-key")):
        with FakeEmbeddings(kind, api_key=None, dimension=8) as fake:
            embed_all(http_embedder(fake), ["a"], deadline=soon())
            assert header not in fake.requests[0].headers
            assert fake.problems == []
        with FakeEmbeddings(kind, api_key=KEY, dimension=8) as fake:
            embed_all(http_embedder(fake), ["a"], deadline=soon())
            assert KEY in fake.requests[0].headers[header]


def test_a_slow_service_times_out_at_the_deadline(fake):
    fake.script(fake.success(delay_s=3.0))
    started = time.monotonic()
    error = failure(http_embedder(fake), timeout_s=0.3)
    assert error.code == "embedding_timeout"
    assert time.monotonic() - started < 2.0


def test_the_per_call_timeout_applies_within_a_far_deadline(fake):
    fake.script(fake.success(delay_s=3.0))
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as caught:
        embed_all(
            http_embedder(fake),
            ["a"],
            limits=EmbeddingLimits(timeout_s=0.3),
            deadline=soon(60),
        )
    assert caught.value.code == "embedding_timeout"
    assert time.monotonic() - started < 2.0


MALFORMED = {
    "not JSON": b"<html>oops</html>",
    "a JSON list": b"[]",
    "empty object": b"{}",
    "truncated": b'{"data": [{"index": 0, "embedding": [0.1,',
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_bodies_are_bad_responses(fake, case):
    fake.script(fake.raw(MALFORMED[case]))
    assert failure(http_embedder(fake)).code == "embedding_bad_response"


def openai_body(items):
    return json.dumps({"object": "list", "data": items, "model": "m"}).encode()


OPENAI_SHAPES = {
    "data is not a list": json.dumps({"data": {"0": [0.1] * 8}}).encode(),
    "one vector for two inputs": openai_body([{"index": 0, "embedding": [0.1] * 8}]),
    "duplicate index": openai_body(
        [{"index": 0, "embedding": [0.1] * 8}, {"index": 0, "embedding": [0.2] * 8}]
    ),
    "index out of range": openai_body(
        [{"index": 0, "embedding": [0.1] * 8}, {"index": 2, "embedding": [0.2] * 8}]
    ),
    "index is a string": openai_body(
        [{"index": "0", "embedding": [0.1] * 8}, {"index": 1, "embedding": [0.2] * 8}]
    ),
    "some indices missing": openai_body(
        [{"embedding": [0.1] * 8}, {"index": 1, "embedding": [0.2] * 8}]
    ),
    "item without embedding": openai_body([{"index": 0, "embedding": [0.1] * 8}, {"index": 1}]),
    "item is not an object": openai_body([{"index": 0, "embedding": [0.1] * 8}, [0.2] * 8]),
    "base64 instead of floats": openai_body(
        [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": "AAAA"}]
    ),
    "string values": openai_body(
        [{"index": 0, "embedding": ["0.1"] * 8}, {"index": 1, "embedding": [0.2] * 8}]
    ),
    "null value": openai_body(
        [{"index": 0, "embedding": [None] + [0.1] * 7}, {"index": 1, "embedding": [0.2] * 8}]
    ),
    "boolean values": openai_body(
        [{"index": 0, "embedding": [True] * 8}, {"index": 1, "embedding": [0.2] * 8}]
    ),
}


@pytest.mark.parametrize("case", sorted(OPENAI_SHAPES))
def test_openai_bad_shapes_are_bad_responses(case):
    with FakeEmbeddings("openai_compatible", api_key=KEY, dimension=8) as fake:
        fake.script(fake.raw(OPENAI_SHAPES[case]))
        error = failure(http_embedder(fake), ["a", "b"])
    assert error.code == "embedding_bad_response"


GEMINI_SHAPES = {
    "embeddings is not a list": json.dumps({"embeddings": {"values": [0.1] * 8}}).encode(),
    "one vector for two inputs": json.dumps({"embeddings": [{"values": [0.1] * 8}]}).encode(),
    "item without values": json.dumps(
        {"embeddings": [{"values": [0.1] * 8}, {"embedding": [0.1] * 8}]}
    ).encode(),
    "values not numbers": json.dumps(
        {"embeddings": [{"values": [0.1] * 8}, {"values": ["x"] * 8}]}
    ).encode(),
    "the generateContent shape": json.dumps({"candidates": []}).encode(),
}


@pytest.mark.parametrize("case", sorted(GEMINI_SHAPES))
def test_gemini_bad_shapes_are_bad_responses(case):
    with FakeEmbeddings("gemini", api_key=KEY, dimension=8) as fake:
        fake.script(fake.raw(GEMINI_SHAPES[case]))
        error = failure(http_embedder(fake), ["a", "b"])
    assert error.code == "embedding_bad_response"


def test_an_oversized_reply_is_refused(fake):
    huge = b'{"data": [' + b" " * (2 * 1024 * 1024) + b"]}"
    fake.script(fake.raw(huge))
    error = failure(http_embedder(fake), ["a"])
    assert error.code == "embedding_bad_response"
    assert "response_bytes" in str(error)
    fake.script(fake.raw(huge, send_length=False))
    assert failure(http_embedder(fake), ["a"]).code == "embedding_bad_response"


def test_an_unreachable_service_is_a_provider_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for kind in MODELS:
        connection = ProviderConnection(
            name="gone", kind=kind, base_url=f"http://127.0.0.1:{port}", api_key=KEY
        )
        embedder = (GeminiEmbedder if kind == "gemini" else OpenAICompatibleEmbedder)(
            connection, MODELS[kind], dimension=8
        )
        error = failure(embedder)
        assert error.code == "embedding_provider_error"
        assert "ConnectError" in str(error)


def test_log_lines_carry_names_and_sizes_only(fake, caplog):
    caplog.set_level(logging.INFO, logger="ctxadmin.embeddings")
    embedder = http_embedder(fake)
    embed_all(embedder, TEXTS, deadline=soon())
    fake.script(fake.error(500, f"echo {SECRET_TEXT}"))
    failure(embedder)
    records = [r for r in caplog.records if r.name == "ctxadmin.embeddings"]
    assert [r.getMessage() for r in records] == ["embedding_call", "embedding_call_failed"]
    ok, failed = records
    assert (ok.connection, ok.kind, ok.model, ok.inputs, ok.status) == (
        "fake",
        fake.kind,
        MODELS[fake.kind],
        len(TEXTS),
        200,
    )
    assert ok.request_bytes > 0 and ok.response_bytes > 0
    assert (failed.code, failed.status) == ("embedding_provider_error", 500)
    for record in records:
        dumped = json.dumps(record.__dict__, default=str)
        for secret in (SECRET_TEXT, "SECRET-TEXT", KEY, fake.base_url):
            assert secret not in dumped


def test_http_embedders_refuse_the_wrong_connection_kind_and_bad_models():
    gemini = ProviderConnection(name="g", kind="gemini", base_url="http://127.0.0.1:9")
    openai = ProviderConnection(name="o", kind="openai_compatible", base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError):
        OpenAICompatibleEmbedder(gemini, "text-embedding-3-small")
    with pytest.raises(ValueError):
        GeminiEmbedder(openai, "gemini-embedding-001")
    for model in ("", "   ", None, "m" * 101):
        with pytest.raises(ValueError):
            OpenAICompatibleEmbedder(openai, model)
    with pytest.raises(ValueError):
        OpenAICompatibleEmbedder(openai, "m", dimension=0)
    assert repr(OpenAICompatibleEmbedder(openai, "m")) == (
        "OpenAICompatibleEmbedder(name='openai_compatible:m', dimension=384)"
    )


def test_fake_server_flags_requests_the_real_api_would_refuse():
    with FakeEmbeddings("openai_compatible", api_key=None) as fake:
        response = _post(fake.base_url + "/v1/embeddings", {"model": "m", "input": ["", "x"]})
        assert response == 400
        assert fake.problems == ["input strings must not be empty"]
    with FakeEmbeddings("gemini", api_key=None) as fake:
        body = {"requests": [{"model": "models/other", "content": {"parts": [{"text": "x"}]}}]}
        assert _post(fake.base_url + "/v1beta/models/m:batchEmbedContents", body) == 400
        assert fake.problems == ["requests[0].model must be the path's model, as models/{model}"]


def _post(url: str, body: dict) -> int:
    import httpx

    return httpx.post(url, json=body, timeout=5).status_code


@pytest.mark.django_db(transaction=True)
def test_the_embedding_task_isolates_an_entry_the_embedder_refuses(monkeypatch):
    """A 4xx for a batch: each entry is embedded on its own, the refused one counts a
    failure and, after three, no longer holds back the entries behind it. A provider that is
    unavailable (5xx) changes nothing: the error propagates and the beat tries again."""
    from memory import vectors
    from memory.models import MemoryEntry
    from memory.tasks import embed_pending
    from tests.conftest import make_tenant

    # This test runs the task itself: no worker of this run is told of these entries.
    monkeypatch.setattr(embed_pending, "delay_on_commit", lambda *args, **kwargs: None)
    client = make_tenant("acme").client()
    ids = []
    for words in ("first memory", "the refused one", "third memory"):
        answer = client.post(
            "/api/v1/apps/acme/users/alice/memories",
            {"content": words, "embed": "async"},
            format="json",
        )
        ids.append(answer.json()["id"])
    with FakeEmbeddings("openai_compatible", api_key=KEY, dimension=384) as fake:
        embedder = http_embedder(fake)
        monkeypatch.setattr(embeddings_module, "embedder_from_settings", lambda: embedder)
        fake.script(fake.error(400), fake.success(), fake.error(422), fake.success())
        assert vectors.embed_pending_batch() == 3
        rows = {str(row.pk): row for row in MemoryEntry.objects.all()}
        assert [rows[i].embedding_model for i in ids] == [embedder.name, "", embedder.name]
        assert [rows[i].embed_failures for i in ids] == [0, 1, 0]
        fake.script(fake.error(400), fake.error(400))
        assert vectors.embed_pending_batch() == 1
        assert vectors.embed_pending_batch() == 1
        assert MemoryEntry.objects.get(pk=ids[1]).embed_failures == 3
        assert vectors.embed_pending_batch() == 0  # given up on: nothing holds the queue
        later = client.post(
            "/api/v1/apps/acme/users/alice/memories",
            {"content": "a newer memory", "embed": "async"},
            format="json",
        ).json()["id"]
        fake.script(fake.error(503))
        with pytest.raises(EmbeddingError) as caught:
            vectors.embed_pending_batch()
        assert caught.value.code == "embedding_provider_error"
        row = MemoryEntry.objects.get(pk=later)
        assert row.embedding is None and row.embed_failures == 0
        assert vectors.embed_pending_batch() == 1  # the provider is back
        assert MemoryEntry.objects.get(pk=later).embedding_model == embedder.name
