"""Text embeddings for long-term memory: the embedders, and the one way to call them.

An ``Embedder`` turns a batch of texts into vectors of a fixed ``dimension`` and has a
``name`` that is recorded on every entry it embeds, so vectors from different embedders are
never compared. ``embed_all`` is how callers use one: it bounds the inputs, splits them into
calls, and checks every reply (one finite vector of the right dimension per input) before
anything is returned; its vectors are L2-normalised, so cosine similarity is a dot product.

- ``base``: ``Embedder``, ``EmbeddingLimits``, ``EmbeddingError`` and the constants.
- ``embed``: ``embed_all`` and ``embed_memories``.
- ``hashing``: ``HashingEmbedder`` (offline, deterministic, lexical).
- ``remote``: ``OpenAICompatibleEmbedder`` and ``GeminiEmbedder`` over
  ``ctxadmin.providers``.
- ``local``: ``LocalEmbedder`` (all-MiniLM-L6-v2, int8 ONNX, the optional ``local`` extra).
- ``settings``: ``embedder_from_settings``.

Failures are ``EmbeddingError`` with a stable ``code``; like ``ProviderError``, messages carry
codes, statuses, counts and sizes only, never a text, a key or a URL. The
``ctxadmin.embeddings`` logger records one line per HTTP call with names and sizes only.
"""

from __future__ import annotations

from memory.embedders.base import (
    DEFAULT_DIMENSION,
    EMBEDDER_KINDS,
    ERROR_CODES,
    MAX_DIMENSION,
    MAX_NAME_CHARS,
    Embedder,
    EmbeddingError,
    EmbeddingLimits,
)
from memory.embedders.embed import clip_utf8, embed_all, embed_memories
from memory.embedders.hashing import HashingEmbedder
from memory.embedders.local import (
    LOCAL_MODEL,
    LOCAL_MODEL_SHA256,
    LOCAL_PACKAGE,
    LOCAL_PACKAGE_VERSION,
    LocalEmbedder,
)
from memory.embedders.remote import GeminiEmbedder, OpenAICompatibleEmbedder
from memory.embedders.settings import embedder_from_settings

__all__ = [
    "DEFAULT_DIMENSION",
    "EMBEDDER_KINDS",
    "ERROR_CODES",
    "LOCAL_MODEL",
    "LOCAL_MODEL_SHA256",
    "LOCAL_PACKAGE",
    "LOCAL_PACKAGE_VERSION",
    "MAX_DIMENSION",
    "MAX_NAME_CHARS",
    "Embedder",
    "EmbeddingError",
    "EmbeddingLimits",
    "GeminiEmbedder",
    "HashingEmbedder",
    "LocalEmbedder",
    "OpenAICompatibleEmbedder",
    "clip_utf8",
    "embed_all",
    "embed_memories",
    "embedder_from_settings",
]
