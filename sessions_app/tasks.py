"""Compaction tasks: thin callers of the services (arguments are ids only)."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.db.models.functions import Now
from django.utils import timezone

from sessions_app.compaction import worker
from sessions_app.models import Checkpoint

logger = logging.getLogger("ctxadmin.compaction")

# A pending row older than this was never picked up (a lost message): publish it again.
REDRIVE_AFTER = timedelta(minutes=2)
# A run inside a web request (no lease) still running after this lost its process (the
# longest timeout is 10 minutes).
ABANDON_AFTER = timedelta(minutes=20)


@shared_task(name="sessions_app.run_compaction")
def run_compaction(checkpoint_id: str) -> str:
    """Claim a pending compaction, or a running one whose worker's lease has ended (one worker
    wins), and run it against the session's latest events and policy; the result is the
    row's status."""
    row = worker.claim(checkpoint_id)
    if row is None:
        return "not_pending"
    return worker.run_claimed(row, row.session).status


@shared_task(name="sessions_app.sweep_compactions")
def sweep_compactions() -> dict:
    """Re-drive pending compactions whose message was lost and running ones whose worker's
    lease has ended; fail those whose workers died ``MAX_ATTEMPTS`` times, and runs inside a
    web request whose process died, so the session can compact again."""
    now = timezone.now()
    stale = list(
        Checkpoint.objects.filter(
            status=Checkpoint.PENDING, created_at__lt=now - REDRIVE_AFTER
        ).values_list("id", flat=True)[:500]
    )
    # Leases are set and compared on the database's clock.
    expired = Checkpoint.objects.filter(status=Checkpoint.RUNNING, lease_expires_at__lte=Now())
    orphaned = list(
        expired.filter(attempts__lt=worker.MAX_ATTEMPTS).values_list("id", flat=True)[:500]
    )
    for checkpoint_id in stale + orphaned:
        run_compaction.delay(str(checkpoint_id))
    lost = expired.filter(attempts__gte=worker.MAX_ATTEMPTS).update(
        status=Checkpoint.FAILED,
        reason="worker_lost",
        message="The workers running this compaction stopped as often as it may be attempted.",
        finished_at=now,
    )
    abandoned = Checkpoint.objects.filter(
        status=Checkpoint.RUNNING, lease_expires_at__isnull=True, created_at__lt=now - ABANDON_AFTER
    ).update(
        status=Checkpoint.FAILED,
        reason="abandoned",
        message="The worker running this compaction stopped.",
        finished_at=now,
    )
    counts = {
        "redriven": len(stale),
        "reclaimable": len(orphaned),
        "worker_lost": lost,
        "abandoned": abandoned,
    }
    if any(counts.values()):
        logger.info("compactions swept", extra=counts)
    return counts
