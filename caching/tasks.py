"""Cache tasks: thin callers of the registry (no arguments)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="caching.cleanup")
def cleanup() -> dict:
    """Retire expired entries, resolve lost creators and delete provider resources, in
    bounded batches; published when a delete is queued and run by the beat."""
    from caching import registry

    return registry.cleanup()
