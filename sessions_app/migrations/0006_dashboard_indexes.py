# The operator dashboard's hourly counts: events by created_at (BRIN) and checkpoints by
# created_at. Built concurrently so a deployment's appends and compactions are not blocked.

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('sessions_app', '0005_tool_tokens'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='checkpoint',
            index=models.Index(fields=['created_at'], name='checkpoint_created'),
        ),
        AddIndexConcurrently(
            model_name='event',
            index=django.contrib.postgres.indexes.BrinIndex(autosummarize=True, fields=['created_at'], name='event_created_brin'),
        ),
    ]
