"""Memory tasks: thin callers of the services (no arguments but ids)."""

from __future__ import annotations

from celery import shared_task

from memory import services

MAX_BATCHES_PER_RUN = 50


@shared_task(name="memory.embed_pending")
def embed_pending() -> int:
    """Embed entries written without a vector, in batches, until none is left (or a bound
    per run; the beat runs it again)."""
    total = 0
    for _ in range(MAX_BATCHES_PER_RUN):
        done = services.embed_pending_batch()
        total += done
        if not done:
            break
    return total
