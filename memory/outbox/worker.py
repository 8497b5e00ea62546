"""The worker: claim one due job under a lease (``leases``), write its batches (each fenced
by the lease and the scope's erasure epoch) or extract them (``extract``, for extraction
jobs), retry with backoff or fail; ``drain`` loops."""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction

from ctxadmin.canonical import canonical_json
from ctxadmin.wake import wake
from memory import dedup, embedders, entries, governance
from memory.models import OutboxJob
from memory.outbox import extract
from memory.outbox.jobs import (
    EVENTS_PROCESSED,
    EXTRACTION_ADAPTER,
    end_jobs,
    write_progress,
)
from memory.outbox.leases import (  # noqa: F401 - the worker's API, as before
    Claim,
    LeaseLost,
    backoff_seconds,
    claim,
    record_failure,
    renew,
)
from memory.scope import check_capacity, current_epoch, lock_scope
from memory.similarity import near_words, normalised_sha256, words
from memory.vectors import embedder_is_local, vector_text

logger = logging.getLogger("ctxadmin.outbox")

BATCH_EVENTS = 500


# ----------------------------------------------------------------------------- processing


@dataclass
class BatchResult:
    added: int = 0
    duplicates: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


def _embedded(items: list[dict]) -> tuple[list[str | None], str]:
    """Vectors (as pgvector text) for the items when the embedder runs in this process; for
    an HTTP embedder none (the entries are searchable lexically at once, and the embedding
    task fills them in)."""

    embedder = embedders.embedder_from_settings()
    if not embedder_is_local(embedder) or not items:
        return [None] * len(items), ""
    vectors = embedders.embed_memories(embedder, [item["text"] for item in items])
    return [vector_text(v) for v in vectors], embedder.name


_SEARCH_TEXT = entries.SEARCH_TEXT.format(author="i.author", ts="i.ts", content="i.content")


def _deduplicated(app, user_id: str, items: list[dict], vectors, result: BatchResult):
    """The items to write, with their vectors and normalised hashes: not those whose text the
    scope or an earlier item holds already (duplicates), nor those that nearly repeat an
    earlier item or one of the scope's memories (merged: skipped, ``near_duplicate``;
    ``memory.dedup``). The texts are locked to the end of the batch's transaction."""
    digests = [normalised_sha256(item["text"]) for item in items]
    dedup.lock_texts(app, user_id, digests)
    held = dedup.same_texts(app, user_id, digests)
    kept: list[int] = []
    kept_words: list[frozenset[str]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if digests[index] in held or digests[index] in seen:
            result.duplicates += 1
            continue
        mine = words(item["text"])
        near = any(near_words(mine, other) for other in kept_words) or (
            dedup.near_duplicate(app, user_id, item["text"]) is not None
        )
        if near:
            result.skipped["near_duplicate"] = result.skipped.get("near_duplicate", 0) + 1
            continue
        seen.add(digests[index])
        kept.append(index)
        kept_words.append(mine)
    return [items[i] for i in kept], [vectors[i] for i in kept], [digests[i] for i in kept]


def _write_batch(cursor, job: OutboxJob, items: list[dict], vectors, model: str) -> BatchResult:
    """Insert the batch's entries, each text once (``_deduplicated``); a key stored already
    is a duplicate (same content) or a skip (``changed_since_ingested``: other content under
    the key; ``expired_key_kept``: an expired entry that retention or a legal hold keeps)."""
    result = BatchResult()
    if not items:
        return result
    app, user_id, session_id = job.app, job.user_id, job.session_id
    terms = governance.write_terms(app, user_id)
    items, vectors, same_texts = _deduplicated(app, user_id, items, vectors, result)
    if not items:
        return result
    keys = [f"session:{session_id}:{item['event_id']}" for item in items]
    governance.release_expired_keys(app, user_id, keys)
    check_capacity(app, user_id, len(items))
    texts = [item["text"] for item in items]
    digests = [hashlib.sha256(text.encode("utf-8")).hexdigest() for text in texts]
    metadata = [
        canonical_json({"role": item["role"], "source": "session"}).decode() for item in items
    ]
    cursor.execute(
        f"""
        INSERT INTO memory_memoryentry
            (id, app_id, user_id, content, content_sha256, metadata, idempotency_key,
             session_id, event_id, author, source_timestamp, search, embedding,
             embedding_model, content_bytes, created_at, updated_at, expires_at, retain_until,
             valid_from, recorded_at, job_id, normalised_sha256)
        SELECT i.id, %s, %s, i.content, i.digest, i.metadata::jsonb, i.key, %s, i.event_id,
               i.author, i.ts::timestamptz,
               memory_search_vector(%s::regconfig, {_SEARCH_TEXT}),
               i.vector::vector, CASE WHEN i.vector IS NULL THEN '' ELSE %s END,
               octet_length(i.content), statement_timestamp(), statement_timestamp(),
               statement_timestamp() + %s::integer * interval '1 second',
               statement_timestamp() + %s::integer * interval '1 day',
               least(coalesce(i.ts::timestamptz, now()), now()), now(), %s, i.same_text
          FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                      %s::text[], %s::text[], %s::text[], %s::text[])
               AS i(id, content, digest, metadata, key, event_id, author, ts, vector, same_text)
        ON CONFLICT (app_id, user_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING idempotency_key
        """,  # noqa: S608 - a constant expression
        [
            app.pk,
            user_id,
            session_id,
            settings.CTXADMIN_MEMORY_TS_CONFIG,
            model,
            terms.ttl_seconds,
            terms.retention_days,
            job.pk,
            [uuid.uuid4() for _ in items],
            texts,
            digests,
            metadata,
            keys,
            [item["event_id"] for item in items],
            [item["author"] for item in items],
            [item["timestamp"] for item in items],
            vectors,
            same_texts,
        ],
    )
    inserted = {row[0] for row in cursor.fetchall()}
    result.added = len(inserted)
    if len(inserted) < len(keys):
        wanted = {k: d for k, d in zip(keys, digests, strict=True) if k not in inserted}
        cursor.execute(
            f"SELECT idempotency_key, content_sha256, {entries.LIVE} FROM memory_memoryentry "  # noqa: S608
            "WHERE app_id = %s AND user_id = %s AND idempotency_key = ANY(%s)",
            [app.pk, user_id, list(wanted)],
        )
        for key, digest, live in cursor.fetchall():
            if not live:
                reason = "expired_key_kept"
            elif digest == wanted[key]:
                result.duplicates += 1
                continue
            else:
                reason = "changed_since_ingested"
            result.skipped[reason] = result.skipped.get(reason, 0) + 1
    return result


def process(claimed: Claim) -> str:
    """Write the claimed job's remaining batches; the job's phase when this worker stops."""
    job, token = claimed.job, claimed.token
    unembedded = False
    try:
        while job.cursor < job.events:
            batch = job.payload[job.cursor : job.cursor + BATCH_EVENTS]
            items = [item for item in batch if "skip" not in item]
            skips: dict[str, int] = {}
            for item in batch:
                if "skip" in item:
                    skips[item["skip"]] = skips.get(item["skip"], 0) + 1
            vectors, model = _embedded(items)
            unembedded = unembedded or bool(items and not model)
            with transaction.atomic(), connection.cursor() as cursor:
                lock_scope(job.app, job.user_id, shared=True)
                renew(cursor, job, token)
                stale = current_epoch(job.app, job.user_id) != job.erasure_epoch
                if stale or not batch:  # not batch: an erasure cleared the payload
                    code = "stale_epoch" if stale else "erased"
                    end_jobs(cursor, OutboxJob.CANCELLED, code, "id = %s", [job.pk])
                    logger.info("outbox_job_cancelled", extra={"job": str(job.pk), "code": code})
                    return OutboxJob.CANCELLED
                result = _write_batch(cursor, job, items, vectors, model)
                for reason, count in result.skipped.items():
                    skips[reason] = skips.get(reason, 0) + count
                _advance(cursor, job, token, len(batch), result, skips)
            logger.info(
                "outbox_batch_written",
                extra={
                    "job": str(job.pk),
                    "batch": job.batches,
                    "events": len(batch),
                    "added": result.added,
                    "duplicates": result.duplicates,
                    "skipped": sum(skips.values()),
                },
            )
        if unembedded:  # an HTTP embedder: the embedding task fills the vectors in
            wake("memory.embed_pending")
        return OutboxJob.COMPLETED
    except LeaseLost:
        logger.info("outbox_lease_lost", extra={"job": str(job.pk)})
        return "lease_lost"
    except Exception as exc:  # the attempt failed: retry later, or fail for good
        return record_failure(job, token, exc)


def _advance(cursor, job: OutboxJob, token: str, size: int, result: BatchResult, skips) -> None:
    job.cursor += size
    job.batches += 1
    job.added += result.added
    job.duplicates += result.duplicates
    for reason, count in skips.items():
        job.skipped_by_reason[reason] = job.skipped_by_reason.get(reason, 0) + count
    job.skipped = sum(job.skipped_by_reason.values())
    done = write_progress(cursor, job, token)
    EVENTS_PROCESSED.labels("added").inc(result.added)
    EVENTS_PROCESSED.labels("duplicate").inc(result.duplicates)
    EVENTS_PROCESSED.labels("skipped").inc(sum(skips.values()))
    if done:
        logger.info(
            "outbox_job_completed",
            extra={
                "job": str(job.pk),
                "added": job.added,
                "duplicates": job.duplicates,
                "skipped": job.skipped,
                "batches": job.batches,
            },
        )


def drain(prefer: str | None = None, *, budget_seconds: float = 60.0) -> dict[str, int]:
    """Claim and process due jobs until none is due or the time budget is spent."""
    deadline = time.monotonic() + budget_seconds
    outcomes: dict[str, int] = {}
    while time.monotonic() < deadline:
        claimed = claim(prefer)
        prefer = None
        if claimed is None:
            break
        if claimed.job.adapter == EXTRACTION_ADAPTER:
            outcome = extract.process(claimed)
        else:
            outcome = process(claimed)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes
