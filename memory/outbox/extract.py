"""Extraction jobs (``extraction.v1``): a claimed job's turns, batch by batch, become memory
operations proposed by its extractor and decided by the server.

For each batch (at most ``BATCH_TURNS`` turns and ``BATCH_CHARS`` characters of text, in
order), outside any transaction: the scope's candidates are read and the extractor is asked
(``memory.extraction``; a model may take its time, holding no lock). Then, in one
transaction under the scope's exclusive lock: the lease is renewed (only if this worker
still owns the job), the job's erasure epoch is checked — an erasure that landed while the
model was answering cancels the job (``stale_epoch``) and nothing of the batch is written,
not even the run — and the whole answer is checked (``memory.proposals.check``) and applied
(``memory.proposals_apply``), or refused whole; either way the run is recorded
(``ExtractionRun``: extractor, model, prompt version, tokens, the answer, the decision) and
the job's cursor and totals advance. A refused answer is an outcome, not a failure: it is
not retried. A failed call (the provider down, rate-limited, unconfigured) retries the job
with backoff, from the batch it failed at.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction

from ctxadmin.credentials import looks_like_secret, redact_secret_text
from memory import extraction, proposals, proposals_apply
from memory.extractors import stored_extractor
from memory.models import ExtractionRun, OutboxJob
from memory.outbox.jobs import (
    EVENTS_PROCESSED,
    EXTRACTION_TOTALS,
    MESSAGES,
    end_jobs,
    write_progress,
)
from memory.outbox.leases import Claim, LeaseLost, record_failure, renew
from memory.scope import current_epoch, lock_scope

logger = logging.getLogger("ctxadmin.outbox")

# What ``process`` answers for a job put back until its budget allows it.
DEFERRED = "deferred"
BATCH_TURNS = 40
BATCH_CHARS = 24_000


def _batch(job: OutboxJob) -> list[dict]:
    """The payload items of the next batch (skipped ones included, counted as skipped)."""
    taken, chars = [], 0
    for item in job.payload[job.cursor :]:
        size = len(item.get("text", ""))
        if taken and (len(taken) >= BATCH_TURNS or chars + size > BATCH_CHARS):
            break
        taken.append(item)
        chars += size
    return taken


def _turn(item: dict) -> dict:
    at = item.get("timestamp")
    return {
        "event_id": item["event_id"],
        "author": item.get("author") or "",
        "role": item.get("role") or "",
        "text": item["text"],
        "timestamp": datetime.fromisoformat(at) if isinstance(at, str) and at else None,
    }


def _decide(job: OutboxJob, turns, candidates, answer) -> tuple[dict, str, str]:
    """Check and apply the answer (in the caller's transaction): the counts, and the
    refusal's code and path ('' when applied)."""
    limits = proposals.Limits(settings.CTXADMIN_MEMORY_MAX_CONTENT_BYTES, looks_like_secret)
    try:
        operations = proposals.check(
            answer.value, candidates, [turn["event_id"] for turn in turns], limits
        )
        with transaction.atomic():  # a savepoint: a refusal part-way undoes what it applied
            counts = proposals_apply.apply(
                job.app,
                job.user_id,
                operations,
                epoch=job.erasure_epoch,
                session_id=job.session_id,
                job_id=str(job.pk),
            )
    except proposals.ProposalError as exc:
        return {}, exc.code, exc.path[:128]
    return counts, "", ""


def _record(cursor, job, token, size, turns, candidates, answer, decision) -> None:
    """The run's row, the job's totals and its cursor past the batch."""
    counts, code, path = decision
    ExtractionRun.objects.create(
        app=job.app,
        user_id=job.user_id,
        session_id=job.session_id,
        job=job,
        batch=job.batches + 1,
        extractor=stored_extractor(job.extractor).kind,
        model=answer.model[:128],
        prompt_version=answer.prompt_version,
        outcome=ExtractionRun.REFUSED if code else ExtractionRun.APPLIED,
        error_code=code,
        error_path=path,
        turns=len(turns),
        candidates=len(candidates),
        input_tokens=answer.input_tokens,
        output_tokens=answer.output_tokens,
        # An answer may hold what the check refused it for: never a credential at rest.
        answer=redact_secret_text(answer.raw) if looks_like_secret(answer.raw) else answer.raw,
        **{name: counts.get(name, 0) for name in ("added", "updated", "retired", "unchanged")},
    )
    totals = {name: int(job.extracted.get(name, 0)) for name in EXTRACTION_TOTALS}
    totals["runs"] += 1
    totals["refused" if code else "applied"] += 1
    for name in ("added", "updated", "retired", "unchanged"):
        totals[name] += counts.get(name, 0)
    totals["input_tokens"] += answer.input_tokens or 0
    totals["output_tokens"] += answer.output_tokens or 0
    job.extracted = totals
    job.added += counts.get("added", 0) + counts.get("updated", 0)
    EVENTS_PROCESSED.labels("extracted").inc(len(turns))
    _advance(cursor, job, token, size)


def _advance(cursor, job: OutboxJob, token: str, size: int) -> None:
    """The job's cursor past ``size`` payload items, its totals as they stand; completed
    (its payload cleared) after the last."""
    job.cursor += size
    job.batches += 1
    job.skipped = sum(1 for item in job.payload[: job.cursor] if "skip" in item)
    write_progress(cursor, job, token)


def _over_budget(job: OutboxJob, estimate: int) -> bool:
    """Whether asking the model (``estimate`` tokens at most) would pass the app's or the
    job's token budget for today (UTC), counted from the runs recorded today. Workers check
    it apart, so several at once may pass it by the batches they have in flight."""
    if not estimate:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT coalesce(sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)), 0),
                   coalesce(sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0))
                            FILTER (WHERE job_id = %s), 0)
              FROM memory_extractionrun
             WHERE app_id = %s AND created_at >= date_trunc('day', now(), 'UTC')
            """,
            [job.pk, job.app_id],
        )
        app_tokens, job_tokens = cursor.fetchone()
    return (
        app_tokens + estimate > settings.CTXADMIN_EXTRACTION_TOKENS_PER_APP_DAY
        or job_tokens + estimate > settings.CTXADMIN_EXTRACTION_TOKENS_PER_JOB_DAY
    )


def _defer(job: OutboxJob, token: str) -> str:
    """Put the job back until the next UTC day, its attempt not counted (a spent budget is
    no failure): it is deferred, never dropped."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE memory_outboxjob
               SET phase = 'retry', owner_token = '', error_code = %s, error_message = %s,
                   attempts = greatest(attempts - 1, 0),
                   due_at = date_trunc('day', now(), 'UTC') + interval '1 day',
                   updated_at = statement_timestamp()
             WHERE id = %s AND owner_token = %s AND phase = 'running'
            """,
            ["extraction_budget_exhausted", MESSAGES["extraction_budget_exhausted"], job.pk, token],
        )
        if cursor.rowcount != 1:
            return "lease_lost"
    logger.info("outbox_extraction_deferred", extra={"job": str(job.pk), "cursor": job.cursor})
    return DEFERRED


def process(claimed: Claim) -> str:
    """Extract the claimed job's remaining batches; the job's phase when this worker stops."""
    job, token = claimed.job, claimed.token
    spec = stored_extractor(job.extractor)
    try:
        while job.cursor < job.events:
            batch = _batch(job)
            turns = [_turn(item) for item in batch if "skip" not in item]
            candidates = extraction.candidates_for(job.app, job.user_id, turns) if turns else []
            prompt = extraction.prompt_for(spec, turns, candidates) if turns else ""
            if turns and _over_budget(job, extraction.estimated_tokens(spec, prompt)):
                return _defer(job, token)
            answer = extraction.extract(spec, turns, candidates, prompt) if turns else None
            with transaction.atomic(), connection.cursor() as cursor:
                lock_scope(job.app, job.user_id)
                renew(cursor, job, token)
                if current_epoch(job.app, job.user_id) != job.erasure_epoch:
                    # The user was erased while the extractor answered: nothing is written.
                    end_jobs(cursor, OutboxJob.CANCELLED, "stale_epoch", "id = %s", [job.pk])
                    logger.info(
                        "outbox_job_cancelled", extra={"job": str(job.pk), "code": "stale_epoch"}
                    )
                    return OutboxJob.CANCELLED
                if answer is None:  # nothing but skipped turns: no extractor was asked
                    _advance(cursor, job, token, len(batch))
                    continue
                counts, code, path = _decide(job, turns, candidates, answer)
                decision = (counts, code, path)
                _record(cursor, job, token, len(batch), turns, candidates, answer, decision)
            logger.info(
                "outbox_extraction_batch",
                extra={
                    "job": str(job.pk),
                    "batch": job.batches,
                    "turns": len(turns),
                    "candidates": len(candidates),
                    "outcome": "refused" if code else "applied",
                    "code": code,
                    **{name: counts.get(name, 0) for name in ("added", "updated", "retired")},
                    "input_tokens": answer.input_tokens,
                    "output_tokens": answer.output_tokens,
                },
            )
        return OutboxJob.COMPLETED
    except LeaseLost:
        logger.info("outbox_lease_lost", extra={"job": str(job.pk)})
        return "lease_lost"
    except Exception as exc:  # the attempt failed: retry later, or fail for good
        return record_failure(job, token, exc)
