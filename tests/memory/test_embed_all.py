"""``embed_all``: every bound (inputs, bytes, deadlines, per-call timeouts) and every bad reply it
refuses, with an in-process embedder; the limits and the error codes (no database)."""

from __future__ import annotations

import math
import time

import pytest

from memory.embedders import (
    ERROR_CODES,
    Embedder,
    EmbeddingError,
    EmbeddingLimits,
    embed_all,
)
from tests.embedding_helpers import (
    SECRET_TEXT,
    norm,
    numbered,
    soon,
)

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
