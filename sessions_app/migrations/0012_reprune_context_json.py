"""Secret pruning reads key names as words now (``token``, ``aws_secret_access_key``,
``connection_string``, fullwidth and zero-width-split spellings…): an event's context JSON is
pruned once, at its append, so events stored before are pruned again here, from their
stored fields, exactly as an append does today. Only rows whose pruned form changes are
written, in batches."""

from datetime import UTC

from django.db import migrations

from ctxadmin.canonical import canonical_json
from ctxadmin.pruning import prune_secrets

BATCH = 1000


def _iso(value) -> str:
    # As ctxadmin.timestamps.iso_timestamp (and PostgreSQL's to_json) write it.
    text = value.astimezone(UTC).isoformat()
    if value.microsecond:
        head, _, tail = text.partition(".")
        text = f"{head}.{tail[:6].rstrip('0')}{tail[6:]}"
    return text


def reprune(apps, schema_editor):
    Event = apps.get_model("sessions_app", "Event")
    last = 0
    while True:
        rows = list(
            Event.objects.filter(pk__gt=last)
            .exclude(context_json="")
            .order_by("pk")
            .values_list(
                "pk",
                "event_id",
                "invocation_id",
                "author",
                "timestamp",
                "content",
                "actions",
                "context_json",
            )[:BATCH]
        )
        if not rows:
            return
        for pk, event_id, invocation, author, when, content, actions, stored in rows:
            item = {
                "event_id": event_id,
                "invocation_id": invocation,
                "author": author,
                "timestamp": _iso(when),
                "content": content,
            }
            if actions:
                item["actions"] = actions
            pruned = canonical_json(prune_secrets(item))
            if pruned.decode("utf-8") != stored:
                Event.objects.filter(pk=pk).update(
                    context_json=pruned.decode("utf-8"), context_bytes=len(pruned)
                )
        last = rows[-1][0]


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0011_checkpoint_compaction_id_unique")]

    operations = [migrations.RunPython(reprune, migrations.RunPython.noop)]
