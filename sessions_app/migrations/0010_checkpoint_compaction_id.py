"""A compaction id lives in its app's key space: each checkpoint gets the id the API shows
(``compaction_id``, the row's own key until now) and its app, filled from the rows."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ctxadmin", "0001_initial"),
        ("sessions_app", "0009_tool_token_ends_are_final"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="app",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="ctxadmin.app",
            ),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="compaction_id",
            field=models.UUIDField(null=True),
        ),
        migrations.RunSQL(
            """
            UPDATE sessions_app_checkpoint c
               SET compaction_id = c.id, app_id = s.app_id
              FROM sessions_app_session s
             WHERE s.id = c.session_id
            """,
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
