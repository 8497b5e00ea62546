"""Tool tokens end when their call is answered or purged, written on the token's row at that
moment. Tokens minted before this rule recorded an answer only at their next use: end now
every open token whose call is answered, or whose call event is gone."""

from django.db import migrations

END_OPEN_TOKENS = """
UPDATE sessions_app_tooltoken t
   SET revoked_at = now(),
       revoked_reason = CASE
           WHEN EXISTS (SELECT 1 FROM sessions_app_event e
                         WHERE e.session_id = t.session_id AND e.seq = t.call_seq)
           THEN 'answered' ELSE 'purged' END
 WHERE t.revoked_at IS NULL
   AND (EXISTS (SELECT 1 FROM sessions_app_event e
                 WHERE e.session_id = t.session_id AND e.seq > t.call_seq
                   AND e.response_ids && ARRAY[t.function_call_id]::varchar[])
        OR NOT EXISTS (SELECT 1 FROM sessions_app_event e
                        WHERE e.session_id = t.session_id AND e.seq = t.call_seq))
"""


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0007_checkpoint_lease"),
    ]

    operations = [migrations.RunSQL(END_OPEN_TOKENS, reverse_sql=migrations.RunSQL.noop)]
