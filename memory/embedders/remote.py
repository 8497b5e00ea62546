"""The embedders that call a provider over HTTP, on the wire formats of
``ctxadmin.providers`` (``openai_compat``, ``gemini``) and the shared transport:

- ``OpenAICompatibleEmbedder``: ``POST /v1/embeddings`` (OpenAI, Ollama, vLLM, TEI).
- ``GeminiEmbedder``: ``POST /v1beta/models/{model}:batchEmbedContents``.

The ``ctxadmin.embeddings`` logger records one line per call with names and sizes only.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from typing import Any

import ctxadmin.providers.gemini as gemini
import ctxadmin.providers.openai_compat as openai_compat
from ctxadmin.providers.base import ProviderConnection
from ctxadmin.providers.transport import elapsed_ms, post_embeddings
from memory.embedders.base import DEFAULT_DIMENSION, Embedder, EmbeddingError, check_dimension

logger = logging.getLogger("ctxadmin.embeddings")

# The bytes a reply may take: a float in JSON is at most ~25 characters with its separator;
# the slack covers the envelope (usage, model, object names).
_BYTES_PER_VALUE = 32
_RESPONSE_SLACK = 64 * 1024
_MAX_MODEL_CHARS = 100


def _check_model(model: Any) -> str:
    if not isinstance(model, str) or not model.strip() or len(model) > _MAX_MODEL_CHARS:
        raise ValueError(f"model must be a non-empty string of at most {_MAX_MODEL_CHARS} chars")
    return model


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
        self.dimension = check_dimension(dimension)
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
            reply = post_embeddings(url, headers, body, deadline=deadline, cap=cap)
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
        return openai_compat.embed_request(
            self.connection,
            self.model,
            texts,
            dimensions=self.dimension if self.request_dimensions else None,
        )

    def _parse(self, envelope: dict[str, Any], count: int, status: int) -> list[Any]:
        return openai_compat.embed_parse(envelope, count, status)

    @staticmethod
    def _tokens(envelope: dict[str, Any]) -> int | None:
        return openai_compat.embed_tokens(envelope)


class GeminiEmbedder(_HttpEmbedder):
    """``POST {base_url}/v1beta/models/{model}:batchEmbedContents`` (key in
    ``x-goog-api-key``), asking for ``outputDimensionality = dimension``. The API takes at
    most 100 requests per batch."""

    kind = "gemini"
    max_batch = gemini.EMBED_MAX_BATCH

    def __init__(
        self, connection: ProviderConnection, model: str, *, dimension: int = DEFAULT_DIMENSION
    ):
        super().__init__(
            connection, _check_model(model).removeprefix("models/"), dimension=dimension
        )

    def _request(self, texts: list[str]) -> tuple[str, dict[str, str], dict[str, Any]]:
        return gemini.embed_request(self.connection, self.model, texts, dimension=self.dimension)

    def _parse(self, envelope: dict[str, Any], count: int, status: int) -> list[Any]:
        return gemini.embed_parse(envelope, count, status)
