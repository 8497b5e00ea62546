"""Memory tasks: thin callers of the services (no arguments but ids)."""

from __future__ import annotations

from celery import shared_task

from memory import governance, services

MAX_BATCHES_PER_RUN = 50
# Expired entries: at most this many batches of ``governance.PURGE_BATCH_SIZE`` per run.
MAX_PURGE_BATCHES_PER_RUN = 20


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


@shared_task(name="memory.purge_expired")
def purge_expired() -> int:
    """Delete entries past their ``expires_at`` (already invisible to reads) in bounded
    batches; what is left waits for the next run of the beat."""
    total = 0
    for _ in range(MAX_PURGE_BATCHES_PER_RUN):
        done = governance.purge_expired_batch()
        total += done
        if done < governance.PURGE_BATCH_SIZE:
            break
    return total
