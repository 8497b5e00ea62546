"""A round trip web → PostgreSQL → broker → worker → PostgreSQL, for operators and tests."""

from __future__ import annotations

import time
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ctxadmin.models import WorkerProbe
from ctxadmin.tasks import complete_worker_probe

PROBE_RETENTION = timedelta(days=1)


def start_worker_probe() -> WorkerProbe:
    """Write a probe row and publish its id once the row has committed."""
    with transaction.atomic():
        probe = WorkerProbe.objects.create()
        complete_worker_probe.delay_on_commit(str(probe.pk))
    return probe


def wait_for_probe(probe: WorkerProbe, timeout: float) -> WorkerProbe | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe.refresh_from_db()
        if probe.completed_at is not None:
            return probe
        time.sleep(0.1)
    return None


def prune_probes() -> int:
    deleted, _ = WorkerProbe.objects.filter(
        created_at__lt=timezone.now() - PROBE_RETENTION
    ).delete()
    return deleted
