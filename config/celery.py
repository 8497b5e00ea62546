"""The Celery application.

Celery and Redis only deliver "go look" signals: the work itself is a PostgreSQL row that a
task claims. Tasks therefore take ids, never content; ``IdOnlyTask`` enforces it at publish
time, and ``delay_on_commit`` (Celery's Django task class) publishes only after the
transaction that wrote the row has committed.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid

from celery import Celery, signals
from celery import __version__ as celery_version
from celery.contrib.django.task import DjangoTask
from celery.exceptions import Reject
from celery.worker.control import inspect_command
from django.conf import settings
from django.db import transaction

from ctxadmin import deployment, telemetry

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
logger = logging.getLogger("ctxadmin.workers")
# How long a worker holds a task of another deployment before handing it back to the queue,
# so that the deployment's own workers get their turn at it.
FOREIGN_TASK_HOLD_SECONDS = 1.0

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
        headers = dict(options.pop("headers", None) or {})
        headers[deployment.TASK_HEADER] = settings.CTXADMIN_DEPLOYMENT
        return super().apply_async(args, kwargs, *rest, headers=headers, **options)

    def __call__(self, *args, **kwargs):
        sender = task_deployment(self.request)
        if sender is not None and sender != settings.CTXADMIN_DEPLOYMENT:
            # Another deployment's task on our queue (both configured with one queue name):
            # never run it and never acknowledge it away; it goes back for its own workers.
            logger.warning(
                "task of another deployment handed back",
                extra={
                    "task": self.name,
                    "task_id": self.request.id,
                    "task_deployment": sender,
                    "deployment": settings.CTXADMIN_DEPLOYMENT,
                },
            )
            time.sleep(FOREIGN_TASK_HOLD_SECONDS)
            raise Reject("task of another deployment", requeue=True)
        return super().__call__(*args, **kwargs)

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


def task_deployment(request) -> str | None:
    """The deployment that published the task being run (None when it did not say)."""
    value = getattr(request, deployment.TASK_HEADER, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(deployment.TASK_HEADER)
    return value


app = Celery("ctxadmin", task_cls=IdOnlyTask)
app.config_from_object("django.conf:settings", namespace="CELERY")


@inspect_command()
def ctxadmin_deployment(state):
    """Which deployment this worker serves, for the start-up check of the others."""
    return {"deployment": settings.CTXADMIN_DEPLOYMENT, "queue": settings.CELERY_TASK_DEFAULT_QUEUE}


def foreign_workers(timeout: float = 2.0) -> list[tuple[str, str]]:
    """(worker, deployment) of the workers of other deployments answering on our queue."""
    replies = app.control.broadcast("ctxadmin_deployment", reply=True, timeout=timeout)
    return deployment.foreign_replies(replies, settings.CTXADMIN_DEPLOYMENT)


def warn_of_foreign_workers(timeout: float = 2.0) -> list[tuple[str, str]]:
    try:
        found = foreign_workers(timeout)
    except Exception:  # the broker is down: the worker reports that itself
        logger.debug("could not ask the other workers for their deployment", exc_info=True)
        return []
    for hostname, theirs in found:
        logger.warning(
            "a worker of another deployment answers on this queue; give each deployment its "
            "own CTXADMIN_CELERY_QUEUE (or leave it unset)",
            extra={
                "worker": hostname,
                "worker_deployment": theirs,
                "deployment": settings.CTXADMIN_DEPLOYMENT,
                "queue": settings.CELERY_TASK_DEFAULT_QUEUE,
            },
        )
    return found


@signals.worker_ready.connect
def _check_queue_is_ours(sender, **kwargs) -> None:
    # In a thread: the worker's own loop must keep running (and answer) while we wait.
    threading.Thread(target=warn_of_foreign_workers, name="deployment-check", daemon=True).start()


# Periodic work, declared in code; each entry names a task that re-drives due rows.
BEAT_SCHEDULE: dict[str, dict] = {
    "sweep-compactions": {"task": "sessions_app.sweep_compactions", "schedule": 60.0},
    "embed-pending-memories": {"task": "memory.embed_pending", "schedule": 60.0},
    # Its schedule is CTXADMIN_MEMORY_NEAR_SWEEP_SECONDS.
    "sweep-near-duplicates": {"task": "memory.sweep_near_duplicates", "schedule": 10.0},
    "purge-expired-memories": {"task": "memory.purge_expired", "schedule": 60.0},
    "maintain-scope-indexes": {"task": "memory.maintain_scope_indexes", "schedule": 120.0},
    # Its schedule is CTXADMIN_OUTBOX_SWEEP_SECONDS, set once the configuration is read.
    "drain-outbox": {"task": "memory.drain_outbox", "schedule": 10.0},
    "prune-outbox": {"task": "memory.prune_outbox", "schedule": 300.0},
    # Its schedule is CTXADMIN_CACHE_CLEANUP_SECONDS.
    "cache-cleanup": {"task": "caching.cleanup", "schedule": 30.0},
    "flush-mcp-counts": {"task": "ctxadmin.flush_mcp_counts", "schedule": 60.0},
}
app.conf.beat_schedule = BEAT_SCHEDULE
telemetry.HOUSEKEEPING_TASKS.update(entry["task"] for entry in BEAT_SCHEDULE.values())


@signals.task_postrun.connect
def _log_housekeeping(sender=None, task_id=None, retval=None, state=None, **kwargs) -> None:
    """A sweeper's outcome: INFO with its counts when it did something, DEBUG when it found
    nothing to do (the beat runs them every few seconds)."""
    name = getattr(sender, "name", None)
    if name not in telemetry.HOUSEKEEPING_TASKS or state != "SUCCESS":
        return
    counts = retval if isinstance(retval, dict) else {"count": retval}
    level = logging.DEBUG if telemetry.idle(retval) else logging.INFO
    logger.log(level, "housekeeping", extra={"task": name, **counts})


@signals.celeryd_after_setup.connect
def _log_worker_start(sender, instance, conf, **kwargs) -> None:
    # Celery's banner is off (``--quiet``): the same facts as one log line.
    logger.info(
        "worker starting",
        extra={
            "worker": sender,
            "celery": celery_version,
            "concurrency": instance.concurrency,
            "queues": sorted(q.name for q in instance.app.amqp.queues.consume_from.values()),
            "deployment": settings.CTXADMIN_DEPLOYMENT,
        },
    )


@signals.beat_init.connect
def _log_beat_start(sender, **kwargs) -> None:
    scheduler = getattr(sender, "scheduler", None)
    logger.info(
        "beat starting",
        extra={
            "celery": celery_version,
            "entries": len(BEAT_SCHEDULE),
            "max_interval_s": getattr(scheduler, "max_interval", None),
            "deployment": settings.CTXADMIN_DEPLOYMENT,
        },
    )


@app.on_after_configure.connect
def _schedule_from_settings(sender, **kwargs) -> None:
    from django.conf import settings

    BEAT_SCHEDULE["drain-outbox"]["schedule"] = float(settings.CTXADMIN_OUTBOX_SWEEP_SECONDS)
    BEAT_SCHEDULE["sweep-near-duplicates"]["schedule"] = float(
        settings.CTXADMIN_MEMORY_NEAR_SWEEP_SECONDS
    )
    BEAT_SCHEDULE["cache-cleanup"]["schedule"] = float(settings.CTXADMIN_CACHE_CLEANUP_SECONDS)


app.autodiscover_tasks()
