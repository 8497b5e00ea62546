"""Facts over time: a memory's key, its valid time and record time, the link to its next
version and who wrote it; at most one live version per key. Existing entries are
backfilled."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


# Existing entries: valid from their source event's time (else their add time), recorded
# when they were added; none has a key, so none is closed.
BACKFILL = """
UPDATE memory_memoryentry
   SET valid_from = coalesce(source_timestamp, created_at), recorded_at = created_at;
"""

# The successor link, in the database: entries are deleted by SQL (an explicit delete,
# erasure, the purge), and deleting a version unlinks the one before it.
SUCCESSOR_FK = """
ALTER TABLE memory_memoryentry ADD CONSTRAINT memory_superseded_by_fk
    FOREIGN KEY (superseded_by_id) REFERENCES memory_memoryentry (id)
    ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED;
"""
DROP_SUCCESSOR_FK = "ALTER TABLE memory_memoryentry DROP CONSTRAINT memory_superseded_by_fk;"


class Migration(migrations.Migration):
    dependencies = [
        ("ctxadmin", "0006_delegate_scope_mcp_calls"),
        ("memory", "0016_redact_metadata_credentials"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryentry",
            name="key",
            field=models.CharField(max_length=128, null=True),
        ),
        migrations.AddField(
            model_name="memoryentry",
            name="recorded_at",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
        ),
        migrations.AddField(
            model_name="memoryentry",
            name="retired_at",
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name="memoryentry",
            name="superseded_by",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="memory.memoryentry",
            ),
        ),
        migrations.AddField(
            model_name="memoryentry",
            name="valid_from",
            field=models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
        ),
        migrations.AddField(
            model_name="memoryentry",
            name="valid_to",
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name="memoryentry",
            name="written_by",
            field=models.CharField(blank=True, db_default="", max_length=10),
        ),
        migrations.AddField(
            model_name="memoryentry",
            name="job_id",
            field=models.UUIDField(null=True),
        ),
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("key__isnull", False)),
                fields=["app", "user_id", "key", "valid_from"],
                name="memory_fact_versions",
            ),
        ),
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("superseded_by__isnull", False)),
                fields=["superseded_by"],
                name="memory_predecessor",
            ),
        ),
        migrations.AddConstraint(
            model_name="memoryentry",
            constraint=models.UniqueConstraint(
                condition=models.Q(("key__isnull", False), ("valid_to__isnull", True)),
                fields=("app", "user_id", "key"),
                name="memory_live_fact_key",
            ),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.RunSQL(SUCCESSOR_FK, DROP_SUCCESSOR_FK),
    ]
