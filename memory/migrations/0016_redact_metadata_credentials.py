"""A memory's metadata is checked as its content is now: an add whose metadata holds a
credential is refused. Entries stored before keep whatever their metadata held, and reads
return it, so here each string at any depth that looks like a credential is redacted (the
whole string when a span resists) and a key that looks like one is dropped with its value.
Only rows whose metadata changes are written, in batches."""

from django.db import migrations

from ctxadmin.credentials import REDACTED, looks_like_secret, redact_secret_text

BATCH = 1000


def _clean(value):
    if isinstance(value, str):
        if not looks_like_secret(value):
            return value
        value = redact_secret_text(value)
        return REDACTED if looks_like_secret(value) else value
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not looks_like_secret(k)}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def redact(apps, schema_editor):
    MemoryEntry = apps.get_model("memory", "MemoryEntry")
    last = None
    while True:
        rows = MemoryEntry.objects.order_by("pk")
        if last is not None:
            rows = rows.filter(pk__gt=last)
        rows = list(rows.values_list("pk", "metadata")[:BATCH])
        if not rows:
            return
        for pk, metadata in rows:
            cleaned = _clean(metadata)
            if cleaned != metadata:
                MemoryEntry.objects.filter(pk=pk).update(metadata=cleaned)
        last = rows[-1][0]


class Migration(migrations.Migration):
    dependencies = [("memory", "0015_memory_entry_ttl_seconds")]

    operations = [migrations.RunPython(redact, migrations.RunPython.noop)]
