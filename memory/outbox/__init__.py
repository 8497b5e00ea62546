"""The durable ingestion outbox: session events become memories through leased jobs.

The package: ``admission`` (and ``sanitise``, what a payload item holds), ``worker``
(claiming, batches, retries), ``operations`` (clients' and operators' actions, pruning) and
``erasure_hook``, over what they share about job rows (``jobs``).

Admission is one local transaction: the session's events after ``after_seq`` (at most
``MAX_JOB_EVENTS`` and ``MAX_JOB_BYTES``) are sanitised — credentials in text redacted,
partial, control, empty and oversized events marked skipped — the scope's erasure epoch is
captured, and the job
row is written (its id derived from the adapter, the scope, the session, the ordered event
ids and the epoch, so the same request finds the same job). Limits on active jobs and bytes,
global and per scope, and a cap on all rows are checked under one lock, so concurrent
admissions cannot overshoot them.

Workers claim one due job at a time with ``FOR UPDATE SKIP LOCKED`` (the earliest due
first: pending and retrying jobs by their next attempt, running ones once their lease has
expired), under a random owner token and a lease. Each batch of at most ``BATCH_EVENTS``
events is written in one transaction that first takes the scope's erasure lock (shared),
renews the lease — only if the token still owns the running job — and checks that the
job's epoch is still the scope's; then writes the entries (each with the idempotency key
``session:<session_id>:<event_id>``, so a re-delivered batch counts duplicates) and the
job's cursor and counts. A lost lease writes nothing; a stale epoch cancels the job and
writes nothing. Failures retry with exponential backoff and jitter until ``max_attempts``;
a job whose worker died that many times fails. Ended jobs keep counts only (their payload is
cleared) and are pruned after the retention period, oldest first, in bounded batches.

Nothing here logs, returns or passes to Celery any content: ids, counts, bytes, codes.
"""
