import time

from django.core.management.base import BaseCommand, CommandError

from ctxadmin.probes import prune_probes, start_worker_probe, wait_for_probe


class Command(BaseCommand):
    help = "Send a probe through the broker to a Celery worker and report the round trip."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=15.0)

    def handle(self, *args, timeout, **options):
        prune_probes()
        started = time.monotonic()
        probe = start_worker_probe()
        done = wait_for_probe(probe, timeout)
        if done is None:
            raise CommandError(f"no worker completed probe {probe.pk} within {timeout:g}s")
        elapsed = (time.monotonic() - started) * 1000
        self.stdout.write(f"probe {probe.pk} completed by {done.worker} in {elapsed:.0f} ms")
