"""``embed_all``, the one way to call an embedder: it bounds the inputs, splits them into
calls, and checks every reply (one finite vector of the right dimension per input) before
anything is returned; its vectors are L2-normalised, so cosine similarity is a dot product.
Every text is embedded in its NFC form, so canonically equivalent texts (``Café`` precomposed
or decomposed) get the same vector.
"""

from __future__ import annotations

import math
import time
import unicodedata
from collections.abc import Sequence
from itertools import repeat
from operator import mul
from typing import Any

from ctxadmin.providers.base import embedding_bad as _bad
from memory.embedders.base import Embedder, EmbeddingError, EmbeddingLimits


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
        [clip_utf8(unicodedata.normalize("NFC", text), limits.max_input_bytes) for text in texts],
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
    """One unit vector per text (of its NFC form), in order, or ``EmbeddingError`` and
    nothing at all.

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
        if not text.isascii():
            text = texts[position] = unicodedata.normalize("NFC", text)
            size = len(text.encode("utf-8"))
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
