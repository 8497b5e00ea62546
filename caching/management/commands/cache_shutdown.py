"""Invalidate every cache scope (of one app, or of the deployment) and delete every provider
cache now: before retiring a deployment, an app or a provider key."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from caching.cleanup import cleanup
from caching.invalidate import invalidate_all
from caching.status import pending_deletes
from ctxadmin.models import App


class Command(BaseCommand):
    help = "Invalidate every cache scope and delete the provider caches now."

    def add_arguments(self, parser):
        parser.add_argument("--app", help="only this app's scopes")

    def handle(self, *args, app=None, **options):
        target = None
        if app is not None:
            target = App.objects.filter(name=app).first()
            if target is None:
                raise CommandError(f"no app named {app!r}")
        retired = invalidate_all(target, reason="shutdown")
        result = cleanup()
        left = pending_deletes(target)
        self.stdout.write(
            f"{retired} entries invalidated; {result['deleted']} provider deletes run; "
            f"{left} still to retry."
        )
