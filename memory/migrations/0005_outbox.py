"""The durable ingestion outbox: jobs, and a one-row count of them kept by statement
triggers (the admission cap reads it instead of counting the table)."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

COUNT_ROWS = """
CREATE FUNCTION memory_outbox_rows_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_outboxrows (id, total)
    SELECT 1, count(*) FROM inserted_jobs
    ON CONFLICT (id) DO UPDATE SET total = memory_outboxrows.total + EXCLUDED.total;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_outbox_rows_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_outboxrows SET total = total - (SELECT count(*) FROM deleted_jobs)
     WHERE id = 1;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_outbox_rows_insert AFTER INSERT ON memory_outboxjob
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION memory_outbox_rows_inserted();

CREATE TRIGGER memory_outbox_rows_delete AFTER DELETE ON memory_outboxjob
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION memory_outbox_rows_deleted();

INSERT INTO memory_outboxrows (id, total) VALUES (1, 0);
"""

UNCOUNT_ROWS = """
DROP TRIGGER IF EXISTS memory_outbox_rows_insert ON memory_outboxjob;
DROP TRIGGER IF EXISTS memory_outbox_rows_delete ON memory_outboxjob;
DROP FUNCTION IF EXISTS memory_outbox_rows_inserted();
DROP FUNCTION IF EXISTS memory_outbox_rows_deleted();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("ctxadmin", "0001_initial"),
        ("memory", "0004_scope_search_inline_vectors"),
    ]

    operations = [
        migrations.CreateModel(
            name="OutboxRows",
            fields=[
                ("id", models.SmallIntegerField(primary_key=True, serialize=False)),
                ("total", models.BigIntegerField()),
            ],
            options={
                "verbose_name_plural": "outbox rows",
            },
        ),
        migrations.AddField(
            model_name="memorypolicy",
            name="ingestion",
            field=models.CharField(db_default="off", default="off", max_length=16),
        ),
        migrations.CreateModel(
            name="OutboxJob",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("user_id", models.CharField(max_length=128)),
                ("scope_fingerprint", models.CharField(max_length=64)),
                ("session_id", models.CharField(max_length=128)),
                ("adapter", models.CharField(max_length=64)),
                ("erasure_epoch", models.BigIntegerField()),
                (
                    "phase",
                    models.CharField(
                        choices=[
                            ("pending", "pending"),
                            ("running", "running"),
                            ("retry", "retry"),
                            ("completed", "completed"),
                            ("failed", "failed"),
                            ("cancelled", "cancelled"),
                        ],
                        max_length=16,
                    ),
                ),
                ("payload", models.JSONField(default=list)),
                ("payload_bytes", models.IntegerField()),
                ("events", models.IntegerField()),
                ("first_seq", models.BigIntegerField()),
                ("last_seq", models.BigIntegerField()),
                ("cursor", models.IntegerField(default=0)),
                ("batches", models.IntegerField(default=0)),
                ("added", models.IntegerField(default=0)),
                ("duplicates", models.IntegerField(default=0)),
                ("skipped", models.IntegerField(default=0)),
                ("redacted", models.IntegerField(default=0)),
                ("skipped_by_reason", models.JSONField(default=dict)),
                ("attempts", models.IntegerField(default=0)),
                ("max_attempts", models.IntegerField()),
                ("due_at", models.DateTimeField()),
                ("owner_token", models.CharField(blank=True, db_default="", max_length=32)),
                ("error_code", models.CharField(blank=True, db_default="", max_length=64)),
                ("error_message", models.CharField(blank=True, db_default="", max_length=256)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "updated_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("started_at", models.DateTimeField(null=True)),
                ("finished_at", models.DateTimeField(null=True)),
                (
                    "app",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="ctxadmin.app",
                    ),
                ),
            ],
            options={
                "permissions": [("operate_outbox", "Can make outbox jobs due now or cancel them")],
                "indexes": [
                    models.Index(
                        condition=models.Q(("phase__in", ["pending", "running", "retry"])),
                        fields=["due_at"],
                        include=("payload_bytes",),
                        name="outbox_claimable",
                    ),
                    models.Index(
                        condition=models.Q(("phase__in", ["pending", "running", "retry"])),
                        fields=["app", "user_id"],
                        include=("payload_bytes",),
                        name="outbox_active_scope",
                    ),
                    models.Index(
                        fields=["app", "user_id", "session_id"], name="outbox_scope_session"
                    ),
                    models.Index(
                        condition=models.Q(("phase__in", ["completed", "failed", "cancelled"])),
                        fields=["finished_at"],
                        name="outbox_terminal",
                    ),
                    models.Index(fields=["app", "phase"], name="outbox_app_phase"),
                ],
            },
        ),
        migrations.RunSQL(COUNT_ROWS, UNCOUNT_ROWS),
    ]
