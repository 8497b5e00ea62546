"""Compaction tasks: thin callers of the services (arguments are ids only)."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.db import connection
from django.utils import timezone

from sessions_app.compaction import services
from sessions_app.models import Checkpoint, Session

logger = logging.getLogger("ctxadmin.compaction")

# A pending row older than this was never picked up (a lost message): publish it again.
REDRIVE_AFTER = timedelta(minutes=2)
# A running row older than this lost its worker (the longest timeout is 10 minutes).
ABANDON_AFTER = timedelta(minutes=20)


@shared_task(name="sessions_app.run_compaction")
def run_compaction(checkpoint_id: str) -> str:
    """Claim a pending compaction (one worker wins) and run it against the session's latest
    events and policy; the result is the row's status."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sessions_app_checkpoint SET status = 'running' "
            "WHERE id = %s AND status = 'pending' RETURNING session_id",
            [checkpoint_id],
        )
        claimed = cursor.fetchone()
    if claimed is None:
        return "not_pending"
    session = Session.objects.select_related("app").get(pk=claimed[0])
    row = Checkpoint.objects.get(pk=checkpoint_id)
    return services.run_claimed(row, session).status


@shared_task(name="sessions_app.sweep_compactions")
def sweep_compactions() -> dict:
    """Re-drive pending compactions whose message was lost; fail running ones whose worker
    died, so the session can compact again."""
    now = timezone.now()
    stale = list(
        Checkpoint.objects.filter(
            status=Checkpoint.PENDING, created_at__lt=now - REDRIVE_AFTER
        ).values_list("id", flat=True)[:500]
    )
    for checkpoint_id in stale:
        run_compaction.delay(str(checkpoint_id))
    abandoned = Checkpoint.objects.filter(
        status=Checkpoint.RUNNING, created_at__lt=now - ABANDON_AFTER
    ).update(
        status=Checkpoint.FAILED,
        reason="abandoned",
        message="The worker running this compaction stopped.",
        finished_at=now,
    )
    if stale or abandoned:
        logger.info("compactions swept", extra={"redriven": len(stale), "abandoned": abandoned})
    return {"redriven": len(stale), "abandoned": abandoned}
