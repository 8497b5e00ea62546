"""App names take every name Google ADK gives an app (1-63 characters from A-Z a-z 0-9 _ -)
and are unique ignoring case, so ``My_App`` and ``my_app`` cannot be two tenants."""

import django.core.validators
import django.db.models.functions.text
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ctxadmin', '0004_credential_ends_are_final'),
    ]

    operations = [
        migrations.AlterField(
            model_name='app',
            name='name',
            field=models.CharField(max_length=63, unique=True, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9_-]{1,63}\\Z', 'An app name is 1-63 characters from A-Z a-z 0-9 _ -.', code='invalid_app_name')]),
        ),
        migrations.AddConstraint(
            model_name='app',
            constraint=models.UniqueConstraint(django.db.models.functions.text.Lower('name'), name='app_name_unique_ignoring_case', violation_error_code='app_name_taken', violation_error_message='An app with this name already exists (names are unique ignoring case).'),
        ),
    ]
