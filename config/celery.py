"""The Celery application.

Celery and Redis only deliver "go look" signals: the work itself is a PostgreSQL row that a
task claims. Tasks therefore take ids, never content; ``IdOnlyTask`` enforces it at publish
time, and ``delay_on_commit`` (Celery's Django task class) publishes only after the
transaction that wrote the row has committed.
"""

from __future__ import annotations

import os
import re
import uuid

from celery import Celery
from celery.contrib.django.task import DjangoTask
from django.db import transaction

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Identifiers only: ids, slugs, fingerprints. Free text cannot pass.
_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$")


class TaskArgumentError(TypeError):
    """A task was given something other than identifiers."""


def check_id_arguments(args, kwargs) -> None:
    values = list(args or ()) + list((kwargs or {}).values())
    for name in kwargs or {}:
        if not _ID_PATTERN.match(str(name)):
            raise TaskArgumentError(f"task keyword {name!r} is not an identifier")
    for value in values:
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            continue
        if isinstance(value, uuid.UUID):
            continue
        if isinstance(value, str) and _ID_PATTERN.match(value):
            continue
        raise TaskArgumentError(
            "task arguments must be identifiers (int, UUID or id string), "
            f"got {type(value).__name__}"
        )


class IdOnlyTask(DjangoTask):
    """A task whose arguments are checked to be identifiers before anything is published."""

    abstract = True

    def apply_async(self, args=None, kwargs=None, *rest, **options):
        check_id_arguments(args, kwargs)
        return super().apply_async(args, kwargs, *rest, **options)

    def delay_on_commit(self, *args, **kwargs) -> None:
        """Publish once the current transaction commits.

        The arguments are checked now, so a mistake fails the request that made it. A broker
        that is down at commit time is logged, not raised: the committed row is the work, and
        the periodic sweeper re-drives it.
        """
        check_id_arguments(args, kwargs)

        def publish() -> None:
            # A named function: Django logs a robust callback's failure by its __qualname__
            # (a functools.partial has none, and the logging itself would raise).
            self.apply_async(args, kwargs)

        publish.__qualname__ = f"publish {self.name}"
        transaction.on_commit(publish, robust=True)


app = Celery("ctxadmin", task_cls=IdOnlyTask)
app.config_from_object("django.conf:settings", namespace="CELERY")


# Periodic work, declared in code; each entry names a task that re-drives due rows.
BEAT_SCHEDULE: dict[str, dict] = {
    "sweep-compactions": {"task": "sessions_app.sweep_compactions", "schedule": 60.0},
    "embed-pending-memories": {"task": "memory.embed_pending", "schedule": 60.0},
    "purge-expired-memories": {"task": "memory.purge_expired", "schedule": 60.0},
    "maintain-scope-indexes": {"task": "memory.maintain_scope_indexes", "schedule": 120.0},
    # Its schedule is CTXADMIN_OUTBOX_SWEEP_SECONDS, set once the configuration is read.
    "drain-outbox": {"task": "memory.drain_outbox", "schedule": 10.0},
    "prune-outbox": {"task": "memory.prune_outbox", "schedule": 300.0},
    # Its schedule is CTXADMIN_CACHE_CLEANUP_SECONDS.
    "cache-cleanup": {"task": "caching.cleanup", "schedule": 30.0},
}
app.conf.beat_schedule = BEAT_SCHEDULE


@app.on_after_configure.connect
def _schedule_from_settings(sender, **kwargs) -> None:
    from django.conf import settings

    BEAT_SCHEDULE["drain-outbox"]["schedule"] = float(settings.CTXADMIN_OUTBOX_SWEEP_SECONDS)
    BEAT_SCHEDULE["cache-cleanup"]["schedule"] = float(settings.CTXADMIN_CACHE_CLEANUP_SECONDS)


app.autodiscover_tasks()
