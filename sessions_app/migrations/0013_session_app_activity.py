# The app-wide sessions list: every user's sessions of an app by last update (updated_at, then
# id), read forwards or backwards. Built concurrently so appends are not blocked meanwhile.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('sessions_app', '0012_reprune_context_json'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='session',
            index=models.Index(fields=['app', 'updated_at', 'id'], name='session_app_activity'),
        ),
    ]
