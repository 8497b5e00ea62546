"""Every checkpoint has its compaction id and app; the id is unique in its app (in a
migration of its own: the filled rows' deferred checks run at the previous one's commit)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0010_checkpoint_compaction_id")]

    operations = [
        migrations.AlterField(
            model_name="checkpoint",
            name="app",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="ctxadmin.app",
            ),
        ),
        migrations.AlterField(
            model_name="checkpoint",
            name="compaction_id",
            field=models.UUIDField(),
        ),
        migrations.AddConstraint(
            model_name="checkpoint",
            constraint=models.UniqueConstraint(
                fields=("app", "compaction_id"), name="checkpoint_compaction_id_per_app"
            ),
        ),
    ]
