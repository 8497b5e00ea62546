# The console's events list: an exact event-id search and an author filter, each through its
# own index. Built concurrently so appends are not blocked meanwhile.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('sessions_app', '0015_user_tokens'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='event',
            index=models.Index(fields=['event_id'], name='event_event_id'),
        ),
        AddIndexConcurrently(
            model_name='event',
            index=models.Index(fields=['author', 'id'], name='event_author'),
        ),
    ]
