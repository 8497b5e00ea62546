"""The durable ingestion outbox from the command line, content-free and as JSON:

outbox stats [--app A]      jobs by phase, oldest due job's wait, expired leases, bytes
outbox status JOB           one job's status (any app)
outbox retry JOB            make a pending or retrying job due now
outbox cancel JOB           cancel an active job
outbox prune                delete ended jobs past the retention period, in batches
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.diagnostics.cli import app_named, dumps, run
from ctxadmin.batches import in_batches
from ctxadmin.errors import not_found, uuid_or_404
from ctxadmin.models import App
from memory import selectors as memory_selectors
from memory.outbox import operations

MAX_PRUNE_BATCH = 100_000


if TYPE_CHECKING:
    from memory.models import OutboxJob


def _job(job_id: str) -> OutboxJob:
    def find():
        job = memory_selectors.outbox_job(uuid_or_404(job_id))
        if job is None:
            raise not_found()
        return job

    return run(find)


def _job_json(job: OutboxJob) -> dict:
    return {"app": job.app.name, **operations.job_json(job)}


class Command(BaseCommand):
    help = "Ingestion outbox: stats, status, retry, cancel, prune (content-free JSON)."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        stats = actions.add_parser("stats", help="jobs by phase, per app")
        stats.add_argument("--app", help="only this app")
        for name, text in (
            ("status", "one job's status"),
            ("retry", "make a pending or retrying job due now"),
            ("cancel", "cancel an active job"),
        ):
            actions.add_parser(name, help=text).add_argument("job_id", metavar="JOB")
        prune = actions.add_parser("prune", help="delete ended jobs past the retention period")
        prune.add_argument("--batch", type=int, default=None, help="rows per batch")
        prune.add_argument("--max-batches", type=int, default=100)
        prune.add_argument(
            "--older-than-seconds",
            type=int,
            default=None,
            help="ended at least this long ago (default CTXADMIN_OUTBOX_RETENTION_SECONDS)",
        )

    def handle(self, *args, action, **options):
        result = getattr(self, f"_{action}")(**options)
        self.stdout.write(dumps(result))

    def _stats(self, app=None, **options) -> dict:
        apps = [app_named(app)] if app is not None else list(App.objects.order_by("name"))
        return {"apps": [{"app": a.name, **operations.stats(a)} for a in apps]}

    def _status(self, job_id, **options) -> dict:
        return _job_json(_job(job_id))

    def _retry(self, job_id, **options) -> dict:
        job = _job(job_id)
        if not operations.retry_now([job.pk]):
            raise CommandError(
                f"outbox_job_not_waiting: the job is {job.phase}; only a pending or retrying "
                "job can be retried"
            )
        job.refresh_from_db()
        return _job_json(job)

    def _cancel(self, job_id, **options) -> dict:
        job = _job(job_id)
        return _job_json(run(lambda: operations.cancel(job.app, str(job.pk))))

    def _prune(self, batch=None, max_batches=100, older_than_seconds=None, **options) -> dict:
        size = settings.CTXADMIN_OUTBOX_PRUNE_BATCH if batch is None else batch
        if not 1 <= size <= MAX_PRUNE_BATCH:
            raise CommandError(f"--batch must be from 1 to {MAX_PRUNE_BATCH}")
        if not 1 <= max_batches <= 10_000:
            raise CommandError("--max-batches must be from 1 to 10000")
        if older_than_seconds is not None and older_than_seconds < 0:
            raise CommandError("--older-than-seconds must be 0 or more")
        older_than = (
            timedelta(seconds=older_than_seconds) if older_than_seconds is not None else None
        )
        pruned = in_batches(
            lambda: operations.prune(size, older_than=older_than), size, max_batches
        )
        return {"pruned": pruned}
