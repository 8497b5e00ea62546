"""Graph threads: put a checkpoint with its new channel blobs, put a task's pending writes,
read checkpoints with their channel values and writes, delete a thread.

Every function takes the app explicitly and sees only its threads: another app's thread id
is simply absent. A put is one transaction under the thread's row lock, so the pruning it
runs never races another put of the same thread, and nothing half-applies.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Now

from ctxadmin.errors import ServiceError, not_found
from ctxadmin.models import App
from ctxadmin.timestamps import iso_timestamp
from sessions_app.threads import rules
from sessions_app.threads.models import GraphThread, ThreadBlob, ThreadCheckpoint, ThreadWrite


def api_error(error: rules.RuleError) -> ServiceError:
    return ServiceError("validation_error", str(error), details={"field": error.field})


def _locked_thread(app: App, thread_id: str) -> GraphThread:
    """The thread (made if new), locked until the transaction ends."""
    GraphThread.objects.bulk_create(
        [GraphThread(app=app, thread_id=thread_id)], ignore_conflicts=True
    )
    return GraphThread.objects.select_for_update().get(app=app, thread_id=thread_id)


@dataclass(frozen=True)
class PutResult:
    checkpoint_id: str
    blobs_stored: int
    pruned: int


def put_checkpoint(app: App, thread_id: str, put: rules.CheckpointPut) -> PutResult:
    """Store the checkpoint (a repeat of its id replaces it) and the blobs of its new channel
    versions (a blob already stored for that channel version is kept), then prune the
    namespace's checkpoints beyond ``CTXADMIN_THREAD_CHECKPOINTS_KEEP`` and what no kept
    checkpoint reads."""
    with transaction.atomic():
        thread = _locked_thread(app, thread_id)
        rows = [
            ThreadBlob(
                thread=thread,
                checkpoint_ns=put.checkpoint_ns,
                channel=blob.channel,
                version=blob.version,
                type=blob.value.type,
                data=blob.value.data,
                size=len(blob.value.data),
            )
            for blob in put.blobs
        ]
        stored = len(ThreadBlob.objects.bulk_create(rows, ignore_conflicts=True))
        ThreadCheckpoint.objects.update_or_create(
            thread=thread,
            checkpoint_ns=put.checkpoint_ns,
            checkpoint_id=put.checkpoint_id,
            defaults={
                "parent_checkpoint_id": put.parent_checkpoint_id or "",
                "type": put.checkpoint.type,
                "data": put.checkpoint.data,
                "metadata": put.metadata,
                "channel_versions": put.channel_versions,
                "size": len(put.checkpoint.data),
            },
        )
        GraphThread.objects.filter(pk=thread.pk).update(updated_at=Now())
        pruned = _prune(thread.pk, put.checkpoint_ns, settings.CTXADMIN_THREAD_CHECKPOINTS_KEEP)
    return PutResult(put.checkpoint_id, stored, pruned)


_PRUNE_CHECKPOINTS = """
DELETE FROM threads_threadcheckpoint
WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s
  AND checkpoint_id < (
    SELECT checkpoint_id FROM threads_threadcheckpoint
    WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s
    ORDER BY checkpoint_id DESC OFFSET %(keep)s - 1 LIMIT 1)
"""
# A write against a checkpoint the namespace does not hold, below its newest one, is
# unreachable: its checkpoint was pruned (the write may have come after), or it will never
# come (ids grow with time). A write ahead of the newest is kept: LangGraph may send a
# task's writes before the put of their checkpoint arrives. NOT IN over the namespace's
# ids is one hashed lookup per write, whatever the planner's statistics say.
_PRUNE_WRITES = """
DELETE FROM threads_threadwrite
WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s
  AND checkpoint_id < (
    SELECT max(checkpoint_id) FROM threads_threadcheckpoint
    WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s)
  AND checkpoint_id NOT IN (
    SELECT checkpoint_id FROM threads_threadcheckpoint
    WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s)
"""
# A blob no kept checkpoint of its namespace names is unreachable (versions are strings,
# never null, so NOT IN is exact).
_PRUNE_BLOBS = """
DELETE FROM threads_threadblob
WHERE thread_id = %(thread)s AND checkpoint_ns = %(ns)s
  AND (channel, version) NOT IN (
    SELECT v.channel, v.version
    FROM threads_threadcheckpoint c, jsonb_each_text(c.channel_versions) AS v(channel, version)
    WHERE c.thread_id = %(thread)s AND c.checkpoint_ns = %(ns)s)
"""


def _prune(thread_pk: int, ns: str, keep: int) -> int:
    """Delete the namespace's checkpoints older than its ``keep`` newest, every write no kept
    checkpoint can read and every blob no kept checkpoint names (a pruned or replaced
    checkpoint's, one sent for a version its checkpoint does not name); the number of
    checkpoints deleted."""
    params = {"thread": thread_pk, "ns": ns, "keep": keep}
    with connection.cursor() as cursor:
        cursor.execute(_PRUNE_CHECKPOINTS, params)
        pruned = cursor.rowcount
        cursor.execute(_PRUNE_WRITES, params)
        cursor.execute(_PRUNE_BLOBS, params)
    return pruned


def put_writes(app: App, thread_id: str, checkpoint_id: str, put: rules.WritesPut) -> int:
    """Store a task's writes against the checkpoint: a write whose (task, index) is stored is
    kept as it is, except LangGraph's special channels (negative indexes), which replace."""
    with transaction.atomic():
        thread = _locked_thread(app, thread_id)
        rows = {
            write.idx: ThreadWrite(
                thread=thread,
                checkpoint_ns=put.checkpoint_ns,
                checkpoint_id=checkpoint_id,
                task_id=put.task_id,
                task_path=put.task_path,
                idx=write.idx,
                channel=write.channel,
                type=write.value.type,
                data=write.value.data,
                size=len(write.value.data),
            )
            for write in put.writes
        }
        kept = [row for idx, row in rows.items() if idx >= 0]
        replaced = [row for idx, row in rows.items() if idx < 0]
        ThreadWrite.objects.bulk_create(kept, ignore_conflicts=True)
        if replaced:
            ThreadWrite.objects.bulk_create(
                replaced,
                update_conflicts=True,
                unique_fields=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                update_fields=["task_path", "channel", "type", "data", "size"],
            )
        GraphThread.objects.filter(pk=thread.pk).update(updated_at=Now())
    return len(rows)


def delete_thread(app: App, thread_id: str) -> bool:
    """Delete the thread with every checkpoint, blob and write (the database cascades)."""
    deleted, _ = GraphThread.objects.filter(app=app, thread_id=thread_id).delete()
    return bool(deleted)


def checkpoints(
    app: App,
    *,
    thread_id: str | None = None,
    checkpoint_ns: str | None = None,
    checkpoint_id: str | None = None,
    before: str | None = None,
    metadata_filter: dict | None = None,
) -> QuerySet[ThreadCheckpoint]:
    """The app's checkpoints (of one thread, namespace, id), newest first."""
    rows = ThreadCheckpoint.objects.filter(
        thread__in=GraphThread.objects.filter(app=app).values("pk")
        if thread_id is None
        else GraphThread.objects.filter(app=app, thread_id=thread_id).values("pk")
    )
    if checkpoint_ns is not None:
        rows = rows.filter(checkpoint_ns=checkpoint_ns)
    if checkpoint_id is not None:
        rows = rows.filter(checkpoint_id=checkpoint_id)
    if before is not None:
        rows = rows.filter(checkpoint_id__lt=before)
    for index, (key, value) in enumerate((metadata_filter or {}).items()):
        name = f"metadata_{index}"
        rows = rows.alias(**{name: KeyTransform(key, "metadata")})
        if value is None:  # LangGraph compares with .get(): an absent key is None too
            rows = rows.filter(Q(**{f"{name}__isnull": True}) | Q(**{name: None}))
        else:
            rows = rows.filter(**{name: value})
    return rows.select_related("thread").order_by("-checkpoint_id", "checkpoint_ns", "thread_id")


def _typed(kind: str, data) -> dict:
    return {"type": kind, "data_base64": base64.b64encode(bytes(data)).decode("ascii")}


_PAGE_BLOBS = """
SELECT c.id, b.channel, b.version, b.type, b.data
FROM threads_threadcheckpoint c
CROSS JOIN LATERAL jsonb_each_text(c.channel_versions) AS cv(channel, version)
JOIN threads_threadblob b
  ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
 AND b.channel = cv.channel AND b.version = cv.version
WHERE c.id = ANY(%s)
"""
_PAGE_WRITES = """
SELECT c.id, w.task_id, w.channel, w.type, w.data, w.task_path, w.idx
FROM threads_threadcheckpoint c
JOIN threads_threadwrite w
  ON w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
 AND w.checkpoint_id = c.checkpoint_id
WHERE c.id = ANY(%s)
ORDER BY c.id, w.task_path COLLATE "C", w.task_id COLLATE "C", w.idx
"""


def as_json(rows: list[ThreadCheckpoint]) -> list[dict]:
    """The checkpoints with the blobs of their channel versions and their pending writes
    (in LangGraph's order: task path, task id, index)."""
    ids = [row.pk for row in rows]
    blobs: dict[int, list[dict]] = defaultdict(list)
    writes: dict[int, list[dict]] = defaultdict(list)
    if ids:
        with connection.cursor() as cursor:
            cursor.execute(_PAGE_BLOBS, [ids])
            for pk, channel, version, kind, data in cursor.fetchall():
                blobs[pk].append({"channel": channel, "version": version, **_typed(kind, data)})
            cursor.execute(_PAGE_WRITES, [ids])
            for pk, task_id, channel, kind, data, task_path, _idx in cursor.fetchall():
                writes[pk].append(
                    {
                        "task_id": task_id,
                        "channel": channel,
                        "task_path": task_path,
                        **_typed(kind, data),
                    }
                )
    return [
        {
            "thread_id": row.thread.thread_id,
            "checkpoint_ns": row.checkpoint_ns,
            "checkpoint_id": row.checkpoint_id,
            "parent_checkpoint_id": row.parent_checkpoint_id or None,
            "checkpoint": _typed(row.type, row.data),
            "metadata": row.metadata,
            "channel_versions": row.channel_versions,
            "blobs": sorted(blobs[row.pk], key=lambda b: b["channel"]),
            "writes": writes[row.pk],
            "created_at": iso_timestamp(row.created_at),
        }
        for row in rows
    ]


def get_checkpoint(app: App, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> dict:
    row = checkpoints(
        app, thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id
    ).first()
    if row is None:
        raise not_found()
    return as_json([row])[0]
