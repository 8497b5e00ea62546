"""Cache tasks: thin callers of the registry (no arguments)."""

from __future__ import annotations

from celery import shared_task

from caching import cleanup as registry_cleanup


@shared_task(name="caching.cleanup")
def cleanup() -> dict:
    """Retire expired entries, resolve lost creators and delete provider resources, in
    bounded batches; published when a delete is queued and run by the beat."""
    return registry_cleanup.cleanup()
