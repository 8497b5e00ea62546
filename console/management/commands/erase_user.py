"""Erase one user's whole memory in an app (entries, queued ingestion work, the consent
record; the erasure epoch advances) and print the content-free receipt as JSON."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from console.diagnostics import services
from console.diagnostics.cli import CLI_ACTOR, app_named, dumps, run


class Command(BaseCommand):
    help = "Erase a user's whole memory in an app (needs --confirm); prints the receipt."

    def add_arguments(self, parser):
        parser.add_argument("app")
        parser.add_argument("user")
        parser.add_argument(
            "--confirm", action="store_true", help="required: this cannot be undone"
        )

    def handle(self, *args, app, user, confirm, **options):
        run(lambda: services.check_identifiers(app=app, user=user))
        if not confirm:
            raise CommandError(
                f"refusing to erase the memory of user {user!r} of app {app!r} without --confirm"
            )
        target = app_named(app)
        receipt = run(lambda: services.erase_user(target, user, CLI_ACTOR))
        self.stdout.write(dumps(receipt))
