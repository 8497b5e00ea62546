"""The embedder the settings name: ``embedder_from_settings``."""

from __future__ import annotations

import os
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ctxadmin.providers.base import UnknownConnection, get_connection
from memory.embedders.base import (
    DEFAULT_DIMENSION,
    EMBEDDER_KINDS,
    Embedder,
    check_dimension,
)
from memory.embedders.hashing import HashingEmbedder
from memory.embedders.local import LOCAL_DIMENSION, LocalEmbedder
from memory.embedders.remote import GeminiEmbedder, OpenAICompatibleEmbedder


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
    kind = getattr(settings, "CTXADMIN_EMBEDDER", "hashing") or "hashing"
    dimension = getattr(settings, "CTXADMIN_EMBEDDING_DIMENSION", DEFAULT_DIMENSION)
    try:
        check_dimension(dimension, minimum=2)
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
