"""The normalised text's hash of every entry (what makes two adds one memory) and the flag
of an entry that nearly repeats another (``memory/dedup.py``).

The hash is backfilled here in batches of ``BATCH`` entries (in Python: the normalisation
is ``memory.similarity.normalised``, Unicode NFKC and case folding, which SQL does not
spell the same way); existing duplicates stay as they are, each new add finds one of them.
"""

import django.db.models.deletion
from django.db import migrations, models

BATCH = 2000

NEAR_FK = """
ALTER TABLE memory_memoryentry ADD CONSTRAINT memory_near_duplicate_of_fk
    FOREIGN KEY (near_duplicate_of_id) REFERENCES memory_memoryentry (id)
    ON DELETE SET NULL DEFERRABLE INITIALLY DEFERRED;
"""
DROP_NEAR_FK = "ALTER TABLE memory_memoryentry DROP CONSTRAINT memory_near_duplicate_of_fk;"


def backfill(apps, schema_editor):
    from memory.similarity import normalised_sha256

    connection = schema_editor.connection
    last = None
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, content FROM memory_memoryentry "
                "WHERE (%s::uuid IS NULL OR id > %s::uuid) ORDER BY id LIMIT %s",
                [last, last, BATCH],
            )
            rows = cursor.fetchall()
            if not rows:
                return
            cursor.execute(
                "UPDATE memory_memoryentry e SET normalised_sha256 = v.sha "
                "FROM unnest(%s::uuid[], %s::text[]) AS v(id, sha) WHERE e.id = v.id",
                [[row[0] for row in rows], [normalised_sha256(row[1]) for row in rows]],
            )
        last = rows[-1][0]


class Migration(migrations.Migration):
    dependencies = [
        ("ctxadmin", "0006_delegate_scope_mcp_calls"),
        ("memory", "0018_version_ends_as_known"),
    ]

    operations = [
        migrations.AddField(
            model_name="memoryentry",
            name="near_duplicate_of",
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
            name="normalised_sha256",
            field=models.CharField(blank=True, db_default="", max_length=64),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.RunSQL(NEAR_FK, DROP_NEAR_FK),
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("key__isnull", True)),
                fields=["app", "user_id", "normalised_sha256"],
                name="memory_same_text",
            ),
        ),
        migrations.AddIndex(
            model_name="memoryentry",
            index=models.Index(
                condition=models.Q(("near_duplicate_of__isnull", False)),
                fields=["near_duplicate_of"],
                name="memory_near_duplicates",
            ),
        ),
    ]
