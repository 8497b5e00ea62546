"""Secret pruning knows more credential names now (``pass``, ``pw``, ``privkey``,
``tls_key``, ``webhook_url``, ``code_verifier``, ``client_assertion``, ``SAMLResponse``,
``mfa_code``, ``_csrf``, ``mot_de_passe``, ``パスワード``, ``contraseña`` read as one word, …):
an event's context JSON is pruned once, at its append, so the context JSON of events stored
before is pruned again here. It was pruned by the earlier rules, which the new ones only
add to, so pruning it again gives what an append gives today. Only rows whose pruned form
changes are written, in batches."""

import json

from django.db import migrations

from ctxadmin.canonical import canonical_json
from ctxadmin.pruning import prune_secrets

BATCH = 1000


def reprune(apps, schema_editor):
    Event = apps.get_model("sessions_app", "Event")
    last = 0
    while True:
        rows = list(
            Event.objects.filter(pk__gt=last)
            .exclude(context_json="")
            .order_by("pk")
            .values_list("pk", "context_json")[:BATCH]
        )
        if not rows:
            return
        for pk, stored in rows:
            pruned = canonical_json(prune_secrets(json.loads(stored))).decode("utf-8")
            if pruned != stored:
                Event.objects.filter(pk=pk).update(
                    context_json=pruned, context_bytes=len(pruned.encode("utf-8"))
                )
        last = rows[-1][0]


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0016_event_console_indexes")]

    operations = [migrations.RunPython(reprune, migrations.RunPython.noop)]
