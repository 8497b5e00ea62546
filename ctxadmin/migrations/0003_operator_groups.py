"""The operator groups: diagnostics viewer, cache operator, erasure operator, content viewer.

Permissions are created after migrations run; they are created here first so the groups can
hold them on a fresh database.
"""

from django.db import migrations

# Models whose console pages show numbers only.
_DIAGNOSTIC_MODELS = {
    "ctxadmin": ["app", "apikey", "workerprobe"],
    "sessions_app": [
        "session",
        "event",
        "checkpoint",
        "compactionstate",
        "appcompactionpolicy",
        "invocation",
        "tooltoken",
    ],
    "memory": [
        "memoryentry",
        "memorypolicy",
        "consent",
        "legalhold",
        "erasureepoch",
        "erasurereceipt",
        "outboxjob",
    ],
    "caching": ["cachescope", "cacheentry"],
    "artifacts": ["artifacthead", "artifactversion"],
}

GROUPS = {
    "diagnostics viewer": [
        (app, f"view_{model}") for app, models in _DIAGNOSTIC_MODELS.items() for model in models
    ],
    "cache operator": [
        ("caching", "view_cachescope"),
        ("caching", "view_cacheentry"),
        ("caching", "invalidate_cachescope"),
    ],
    "erasure operator": [
        ("memory", "view_memoryentry"),
        ("memory", "erase_memoryentry"),
        ("memory", "view_erasurereceipt"),
        ("memory", "view_erasureepoch"),
        ("memory", "view_consent"),
        ("memory", "view_legalhold"),
        ("memory", "view_outboxjob"),
        ("memory", "operate_outbox"),
    ],
    "content viewer": [
        ("ctxadmin", "view_content"),
        ("ctxadmin", "view_auditlog"),
        ("sessions_app", "view_session"),
        ("sessions_app", "view_event"),
        ("sessions_app", "view_checkpoint"),
        ("memory", "view_memoryentry"),
    ],
}


def create_groups(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # The historical app registry's configs (never the running process's).
    for config in apps.get_app_configs():
        config.models_module = True
        create_permissions(config, verbosity=0, apps=apps)
        config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, wanted in GROUPS.items():
        group, _created = Group.objects.get_or_create(name=name)
        for app_label, codename in wanted:
            permission = Permission.objects.get(
                content_type__app_label=app_label, codename=codename
            )
            group.permissions.add(permission)


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=list(GROUPS)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("ctxadmin", "0002_audit_log"),
        ("sessions_app", "0005_tool_tokens"),
        ("memory", "0008_erase_permission"),
        ("caching", "0002_entry_hits"),
        ("artifacts", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
