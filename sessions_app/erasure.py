"""What a user of sessions reaches without a session, ended when the user is erased
(``ctxadmin.erasure``): their user and tool tokens are revoked (reason ``erased``) and their
``user:`` state is removed. Their sessions are not: each is deleted on its own (SECURITY.md,
"What erasure covers")."""

from __future__ import annotations

from django.db import connection
from django.utils import timezone

from ctxadmin.models import App
from sessions_app.models import ToolToken


def erase_user_reach(app: App, user_id: str) -> dict[str, int]:
    revoked = ToolToken.objects.filter(app=app, user_id=user_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_reason="erased"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM sessions_app_userstate WHERE app_id = %s AND user_id = %s "
            "RETURNING (SELECT count(*) FROM jsonb_object_keys(state))",
            [app.pk, user_id],
        )
        row = cursor.fetchone()
    return {"tokens_revoked": revoked, "user_state_keys": int(row[0]) if row else 0}
