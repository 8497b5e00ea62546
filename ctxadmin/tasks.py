from __future__ import annotations

import logging
import socket

from celery import shared_task
from django.utils import timezone

from ctxadmin import mcp_calls
from ctxadmin.models import WorkerProbe

logger = logging.getLogger("ctxadmin.mcp")


@shared_task(name="ctxadmin.complete_worker_probe")
def complete_worker_probe(probe_id: str) -> None:
    """Mark a probe completed; a probe that no longer exists (rolled back, pruned) is a no-op."""
    WorkerProbe.objects.filter(pk=probe_id, completed_at__isnull=True).update(
        completed_at=timezone.now(), worker=socket.gethostname()[:255]
    )


@shared_task(name="ctxadmin.flush_mcp_counts")
def flush_mcp_counts() -> None:
    """Move the MCP call counts from Redis into PostgreSQL; prune hours past the retention."""
    moved = mcp_calls.flush()
    pruned = mcp_calls.prune()
    level = logging.INFO if moved or pruned else logging.DEBUG
    logger.log(level, "mcp counts flushed", extra={"calls": moved, "hours_pruned": pruned})
