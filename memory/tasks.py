"""Memory tasks: thin callers of the services (no arguments but ids)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from ctxadmin.batches import in_batches
from memory import dedup, governance, scope_index, search, vectors
from memory.outbox import operations, worker

MAX_BATCHES_PER_RUN = 50
# Expired entries: at most this many batches of ``governance.PURGE_BATCH_SIZE`` per run.
MAX_PURGE_BATCHES_PER_RUN = 20


@shared_task(name="memory.embed_pending")
def embed_pending() -> int:
    """Embed entries written without a vector, in batches, until none is left (or a bound
    per run; the beat runs it again)."""
    return in_batches(vectors.embed_pending_batch, 1, MAX_BATCHES_PER_RUN)


@shared_task(name="memory.sweep_near_duplicates")
def sweep_near_duplicates() -> int:
    """Flag the explicit adds queued since the last run that nearly repeat an earlier entry,
    in batches, until the queue is empty (or a bound per run; the beat runs it again)."""
    return in_batches(
        lambda: dedup.sweep_near_duplicates()[0],
        dedup.SWEEP_BATCH,
        MAX_BATCHES_PER_RUN,
    )


@shared_task(name="memory.flag_near_duplicates")
def flag_near_duplicates(entry_id: str) -> int:
    """Flag one entry (a message published by a version that flagged each add in a task of
    its own: kept so that such messages still queued after an upgrade are served)."""
    return dedup.flag_near_duplicates([entry_id])


@shared_task(name="memory.purge_expired")
def purge_expired() -> int:
    """Delete entries past their ``expires_at`` (already invisible to reads) in bounded
    batches; what is left waits for the next run of the beat."""
    purged = in_batches(
        governance.purge_expired_batch, governance.PURGE_BATCH_SIZE, MAX_PURGE_BATCHES_PER_RUN
    )
    search.prune_search_counts()  # hourly rows past their retention: a handful at most
    return purged


# How long one drain run keeps claiming jobs (below the task's soft time limit); the beat and
# the admissions' own messages start the next run.
DRAIN_BUDGET_SECONDS = 50
# Ended outbox jobs: at most this many batches of ``CTXADMIN_OUTBOX_PRUNE_BATCH`` per run.
MAX_PRUNE_BATCHES_PER_RUN = 10


@shared_task(
    name="memory.maintain_scope_indexes",
    soft_time_limit=settings.CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_SECONDS + 60,
    time_limit=settings.CTXADMIN_MEMORY_SCOPE_INDEX_BUILD_SECONDS + 120,
)
def maintain_scope_indexes() -> dict:
    """Build (one per run) and drop large scopes' own vector indexes
    (``memory/scope_index.py``); runs again at once while a scope waits for one."""
    result = scope_index.maintain(max_builds=1)
    if result.get("more"):
        maintain_scope_indexes.apply_async()
    return result


@shared_task(name="memory.drain_outbox")
def drain_outbox(job_id: str | None = None) -> dict:
    """Claim and process due outbox jobs (``job_id`` first, when it is due) until none is
    due or the run's budget is spent. Published on admission's commit and by the beat."""
    budget = min(DRAIN_BUDGET_SECONDS, settings.CELERY_TASK_SOFT_TIME_LIMIT * 0.5)
    return worker.drain(job_id, budget_seconds=budget)


@shared_task(name="memory.prune_outbox")
def prune_outbox() -> int:
    """Delete ended outbox jobs past the retention period, oldest first, in bounded
    batches; what is left waits for the next run of the beat."""
    return in_batches(
        operations.prune, settings.CTXADMIN_OUTBOX_PRUNE_BATCH, MAX_PRUNE_BATCHES_PER_RUN
    )
