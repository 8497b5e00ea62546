"""The entries' vectors: one embedded before an add answers, the backlog of entries
written without one (filled in by the embedding task), and pgvector's text form."""

from __future__ import annotations

import logging

from django.db import connection, transaction

from ctxadmin.errors import ServiceError
from memory import embedders

logger = logging.getLogger("ctxadmin.memory")

# How many times the embedding task tries an entry the embedder refuses for its content.
MAX_EMBED_FAILURES = 3


def embedder_is_local(embedder) -> bool:
    return not getattr(embedder, "remote", False)


def embed_one(embedder, text: str) -> list[float]:
    try:
        return embedders.embed_memories(embedder, [text])[0]
    except embedders.EmbeddingError as exc:
        raise ServiceError(
            exc.code, "The embedder could not embed this memory.", status_code=502
        ) from None


def vector_text(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _provider_unavailable(exc) -> bool:
    """An embedding failure that says nothing about the texts (a timeout, a rate limit, a
    server error or no connection): every text would fail alike for now."""
    return exc.code in ("embedding_timeout", "embedding_rate_limited") or (
        exc.code == "embedding_provider_error" and (exc.status is None or exc.status >= 500)
    )


def embed_pending_batch(batch_size: int = 128) -> int:
    """Embed up to ``batch_size`` entries that have no vector yet (claimed with SKIP LOCKED,
    so several workers share the backlog); the count of entries handled.

    When the embedder refuses the batch for its content (a 4xx, a malformed reply), each
    entry is embedded on its own: the others get their vector, and the refused one counts a
    failure; after ``MAX_EMBED_FAILURES`` it is no longer tried (it stays searchable
    lexically; ``reembed`` tries again), so one entry never holds back the ones behind it.
    When the provider is unavailable, nothing changes and the error propagates: the beat
    tries again later."""
    embedder = embedders.embedder_from_settings()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, content FROM memory_memoryentry "
                "WHERE embedding IS NULL AND embed_failures < %s "
                "ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED",
                [MAX_EMBED_FAILURES, batch_size],
            )
            rows = cursor.fetchall()
        if not rows:
            return 0
        refused: list = []
        try:
            vectors = embedders.embed_memories(embedder, [content for _id, content in rows])
            embedded = list(zip(rows, vectors, strict=True))
        except embedders.EmbeddingError as exc:
            if _provider_unavailable(exc):
                raise
            embedded = []
            if len(rows) == 1:  # the batch was this entry: refused already
                refused.append(rows[0][0])
            else:
                for row in rows:
                    try:
                        vector = embedders.embed_memories(embedder, [row[1]])[0]
                    except embedders.EmbeddingError as one:
                        if _provider_unavailable(one):
                            raise
                        refused.append(row[0])
                    else:
                        embedded.append((row, vector))
        with connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE memory_memoryentry SET embedding = %s::vector, embedding_model = %s, "
                "updated_at = now() WHERE id = %s",
                [
                    (vector_text(vector), embedder.name, entry_id)
                    for (entry_id, _content), vector in embedded
                ],
            )
            if refused:
                cursor.execute(
                    "UPDATE memory_memoryentry SET embed_failures = embed_failures + 1 "
                    "WHERE id = ANY(%s)",
                    [refused],
                )
    if refused:
        logger.warning(
            "memory_embedding_refused", extra={"entries": len(refused), "batch": len(rows)}
        )
    return len(rows)
