from __future__ import annotations

import socket

from celery import shared_task
from django.utils import timezone

from ctxadmin.models import WorkerProbe


@shared_task(name="ctxadmin.complete_worker_probe")
def complete_worker_probe(probe_id: str) -> None:
    """Mark a probe completed; a probe that no longer exists (rolled back, pruned) is a no-op."""
    WorkerProbe.objects.filter(pk=probe_id, completed_at__isnull=True).update(
        completed_at=timezone.now(), worker=socket.gethostname()[:255]
    )
