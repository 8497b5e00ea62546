"""Graph threads: LangGraph's checkpoints, channel blobs and pending writes, per app.

A ``GraphThread`` is one thread id of an app. Its ``ThreadCheckpoint`` rows are the
checkpoints of each namespace (the checkpoint itself, without channel values, as the bytes
the client serialised, its metadata as JSON and its channel versions); a channel's value is
a ``ThreadBlob`` stored once per (thread, namespace, channel, version) however many
checkpoints name that version. ``ThreadWrite`` rows are a task's pending writes against one
checkpoint. Every foreign key to the thread is ``ON DELETE CASCADE`` in the database
(migration 0001): deleting a thread is one statement.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from ctxadmin.models import App


class GraphThread(models.Model):
    app = models.ForeignKey(App, on_delete=models.CASCADE, related_name="+", db_index=False)
    thread_id = models.CharField(max_length=128)
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["app", "thread_id"], name="graphthread_unique"),
        ]

    def __str__(self) -> str:
        return f"thread {self.pk}"


class _ThreadRow(models.Model):
    thread = models.ForeignKey(
        GraphThread,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        db_index=False,
    )
    checkpoint_ns = models.CharField(max_length=512, blank=True, default="")

    class Meta:
        abstract = True


class ThreadCheckpoint(_ThreadRow):
    checkpoint_id = models.CharField(max_length=128, db_collation="C")
    parent_checkpoint_id = models.CharField(max_length=128, blank=True, default="")
    type = models.CharField(max_length=64)
    data = models.BinaryField()
    metadata = models.JSONField(default=dict)
    channel_versions = models.JSONField(default=dict)
    size = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id"], name="threadcheckpoint_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.checkpoint_id}"


class ThreadBlob(_ThreadRow):
    channel = models.CharField(max_length=256)
    version = models.CharField(max_length=128)
    type = models.CharField(max_length=64)
    data = models.BinaryField()
    size = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "channel", "version"], name="threadblob_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"blob {self.pk}"


class ThreadWrite(_ThreadRow):
    checkpoint_id = models.CharField(max_length=128, db_collation="C")
    task_id = models.CharField(max_length=256)
    task_path = models.CharField(max_length=1024, blank=True, default="")
    idx = models.IntegerField()
    channel = models.CharField(max_length=256)
    type = models.CharField(max_length=64)
    data = models.BinaryField()
    size = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="threadwrite_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"write {self.pk}"
