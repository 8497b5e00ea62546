"""A checked batch of proposed operations (``memory.proposals``) applied to one scope, in
one transaction: every operation lands, or none does.

- ``add``: a memory as an add makes one (``memory.entries``), a near-duplicate merged into
  what the scope holds (as ingestion merges it), the same text being the memory that holds it;
  with a key, a version of that fact.
- ``update``: a keyed candidate gets a new version of its key, valid from now (superseding
  it); an unkeyed one is followed by a new memory (keyed when the operation gives a key) and
  its own validity is closed, linked to that memory.
- ``retire``: the candidate's validity is closed now: it stays, found at earlier ``as_of``
  times and in its key's history, never deleted.
- ``noop``: nothing.

A candidate no longer valid (superseded, retired, deleted, erased or expired since it was
shown) refuses the whole batch (``ProposalError`` ``candidate_gone``): the extractor saw a
memory that is not there any more. Under the scope's exclusive lock, after the erasure
epoch the batch was prepared at is checked: an erasure that landed meanwhile refuses it
(409 ``memory_erasure_epoch_stale``), so nothing of an erased user comes back.
"""

from __future__ import annotations

from collections import Counter

from django.db import connection, transaction

from ctxadmin.models import App
from memory import entries
from memory.facts import LIVE
from memory.inputs import NewMemory
from memory.proposals import Operation, ProposalError
from memory.scope import check_epoch, lock_scope

_CLOSE = f"""
    UPDATE memory_memoryentry
       SET valid_to = now(), retired_at = now(), superseded_by_id = %s::uuid, updated_at = now()
     WHERE app_id = %s AND user_id = %s AND id = %s::uuid AND valid_to IS NULL
       AND valid_from <= now() AND {LIVE}
"""  # noqa: S608 - a constant condition


def _still_valid(app: App, user_id: str, operation: Operation, path: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM memory_memoryentry WHERE app_id = %s AND user_id = %s "  # noqa: S608
            f"AND id = %s::uuid AND valid_to IS NULL AND {LIVE}",
            [app.pk, user_id, operation.candidate.memory_id],
        )
        if cursor.fetchone() is None:
            raise ProposalError("candidate_gone", path)


def _close(app: App, user_id: str, memory_id: str, successor: str | None, path: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(_CLOSE, [successor, app.pk, user_id, memory_id])
        if cursor.rowcount != 1:
            raise ProposalError("candidate_gone", path)


def _new(operation: Operation, session_id: str) -> NewMemory:
    return NewMemory(
        content=operation.content,
        metadata={"source": "extraction"},
        idempotency_key=None,
        session_id=session_id,
        event_id=operation.source_event_ids[0],
        author="",
        source_timestamp=None,
        embed="auto",
        key=operation.key,
    )


def apply(
    app: App,
    user_id: str,
    operations: list[Operation],
    *,
    epoch: int | None = None,
    session_id: str = "",
    written_by: str = "",
    job_id: str | None = None,
) -> dict[str, int]:
    """Apply ``operations`` (checked) to the scope in one transaction; how many of each
    outcome: ``added``, ``updated``, ``retired``, ``unchanged`` (a noop, or an add the scope
    held already, as such or nearly). ``job_id``: the extraction job the new memories name
    as their writer (their history says so)."""
    outcomes: Counter[str] = Counter()
    written: list[str] = []
    with transaction.atomic():
        lock_scope(app, user_id)
        if epoch is not None:
            check_epoch(app, user_id, epoch)
        for index, operation in enumerate(operations):
            path = f"operations[{index}]"
            if operation.op == "noop":
                outcomes["unchanged"] += 1
            elif operation.op == "add":
                entry, outcome = entries.merge_memory(
                    app, user_id, _new(operation, session_id), written_by=written_by
                )
                if outcome == entries.CREATED:
                    written.append(entry["id"])
                outcomes["added" if outcome == entries.CREATED else "unchanged"] += 1
            elif operation.op == "retire":
                _close(app, user_id, operation.candidate.memory_id, None, f"{path}.candidate")
                outcomes["retired"] += 1
            else:  # update
                _still_valid(app, user_id, operation, f"{path}.candidate")
                candidate = operation.candidate
                entry, created = entries.add_memory(
                    app, user_id, _new(operation, session_id), written_by=written_by
                )
                # The candidate's own text again: as such, or as its key's live version.
                if entry["id"] == candidate.memory_id or (candidate.key and not created):
                    outcomes["unchanged"] += 1
                    continue
                if candidate.key is None:
                    _close(app, user_id, candidate.memory_id, entry["id"], f"{path}.candidate")
                written.append(entry["id"])
                outcomes["updated"] += 1
        if job_id is not None and written:
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE memory_memoryentry SET job_id = %s::uuid "
                    "WHERE app_id = %s AND user_id = %s AND id = ANY(%s::uuid[])",
                    [job_id, app.pk, user_id, written],
                )
    return {name: outcomes[name] for name in ("added", "updated", "retired", "unchanged")}
